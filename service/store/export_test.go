package store

// Internals the package's external tests check.
var (
	ColumnSet    = columnSet
	HasIndex     = hasIndex
	ValidCrossed = validCrossed
	UsageColumns = usageColumns
)

const MaxCrossedLen = maxCrossedLen
