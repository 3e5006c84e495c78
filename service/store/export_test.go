package store

// Internals the package's external tests check.
var (
	ColumnSet    = columnSet
	ValidCrossed = validCrossed
	UsageColumns = usageColumns
)

const MaxCrossedLen = maxCrossedLen
