package store

import (
	"database/sql"
	"fmt"
)

// scanner is a row to scan: *sql.Row, *sql.Rows, or a row of eachRow.
type scanner interface {
	Scan(dest ...any) error
}

// scanFunc is a Scan function as a scanner.
type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }

// rowScanner is the row eachRow hands to its callback: rows' Scan, its
// errors wrapped by wrap.
type rowScanner struct {
	rows *sql.Rows
	wrap func(error) error
}

func (r rowScanner) Scan(dest ...any) error {
	if err := r.rows.Scan(dest...); err != nil {
		return r.wrap(err)
	}
	return nil
}

// eachRow is the store's one loop over query results: it calls row for
// every row of rows, then closes rows. It stops at row's first error and
// returns it as it is; a row's Scan error reaches row wrapped by wrapScan,
// and rows' own error after the last row (the query failed while it was
// read) is returned wrapped by wrapErr.
func eachRow(rows *sql.Rows, wrapScan, wrapErr func(error) error, row func(scanner) error) error {
	defer rows.Close()
	sc := rowScanner{rows: rows, wrap: wrapScan}
	for rows.Next() {
		if err := row(sc); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return wrapErr(err)
	}
	return nil
}

// scanRows is eachRow for a query of the store's operation op: Scan errors
// and the rows' own error are op's (dbErr).
func scanRows(rows *sql.Rows, op string, row func(scanner) error) error {
	wrap := func(err error) error { return dbErr(op, err) }
	return eachRow(rows, wrap, wrap, row)
}

// collect is scanRows returning what row makes of each row, in order (nil
// when there is none, or on an error).
func collect[T any](rows *sql.Rows, op string, row func(scanner) (T, error)) ([]T, error) {
	var out []T
	err := scanRows(rows, op, func(sc scanner) error {
		v, err := row(sc)
		out = append(out, v)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// scanAll is eachRow for the reads of a rebuild (ReadFamilies,
// FamilyChanges): a Scan error is the data's (ErrUnreadable: reading the
// families one by one finds the one at fault); the rows' own error is the
// database's and is returned as it is.
func scanAll(rows *sql.Rows, row func(scanner) error) error {
	return eachRow(rows, func(err error) error { return fmt.Errorf("%w: %w", ErrUnreadable, err) },
		func(err error) error { return err }, row)
}
