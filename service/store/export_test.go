package store

import (
	"context"
	"database/sql"
)

// RunUsageScript runs usage_record's CREATE script alone (no retired
// index dropped after it), in dialect ("mysql", "sqlite").
func RunUsageScript(ctx context.Context, db *sql.DB, dialect string) error {
	return runScript(ctx, db, "migrations/"+dialect, usageScript)
}

// Internals the package's external tests check.
var (
	ColumnSet    = columnSet
	HasIndex     = hasIndex
	ValidCrossed = validCrossed
	UsageColumns = usageColumns
)

const MaxCrossedLen = maxCrossedLen
