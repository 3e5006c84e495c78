package writebehind

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dabom/dpcs/internal/sqldialect"
)

// SQLOption configures a SQLWriter.
type SQLOption func(*sqlConfig) error

type sqlConfig struct {
	dialect sqldialect.Dialect
	maxRows int
}

// WithDialect names the SQL dialect, "mysql" (also MariaDB) or "sqlite".
// Default: detected from the driver of the *sql.DB
// (github.com/go-sql-driver/mysql, modernc.org/sqlite).
func WithDialect(name string) SQLOption {
	return func(c *sqlConfig) error {
		d, err := sqldialect.Parse(name)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		c.dialect = d
		return nil
	}
}

// WithMaxRows caps the rows of one INSERT statement; a larger batch is
// written as several statements (further capped by the dialect's
// placeholder limit). Default: 1000.
func WithMaxRows(n int) SQLOption {
	return func(c *sqlConfig) error {
		if n < 1 {
			return fmt.Errorf("%w: max rows must be ≥ 1", ErrInvalid)
		}
		c.maxRows = n
		return nil
	}
}

// RowFunc returns the column values of item, in the writer's column order.
// time.Time values are converted for the dialect (UTC; text in SQLite). An
// error means item can never be written (it becomes an *ItemError).
type RowFunc[T any] func(item T) ([]any, error)

// SQLWriter is a Writer that inserts each batch into one table with
// multi-row insert-ignore statements (MySQL `INSERT IGNORE`, SQLite
// `INSERT OR IGNORE`): rows whose unique key exists already are skipped, so
// writing the same items again is harmless. It works for any table.
//
// Items whose RowFunc fails are reported as *ItemErrors before anything is
// sent; database errors about the data (sqldialect.IsPermanent) are wrapped
// with Permanent; every other error (connection, lock, timeout) is
// transient. Statements are prepared once per row count and reused.
//
// With MySQL, note that INSERT IGNORE also turns data errors (a too-long
// string) into warnings and stores a truncated value: validate in the
// RowFunc.
type SQLWriter[T any] struct {
	db      *sql.DB
	d       sqldialect.Dialect
	table   string
	cols    []string
	row     RowFunc[T]
	maxRows int

	mu    sync.Mutex
	stmts map[int]*sql.Stmt

	inserted atomic.Int64
}

var _ Writer[int] = (*SQLWriter[int])(nil)

// NewSQLWriter returns a writer inserting into table (columns cols) the rows
// that row makes of each item.
func NewSQLWriter[T any](db *sql.DB, table string, cols []string, row RowFunc[T], opts ...SQLOption) (*SQLWriter[T], error) {
	if db == nil || row == nil {
		return nil, fmt.Errorf("%w: nil db or row func", ErrInvalid)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("%w: no columns", ErrInvalid)
	}
	for _, n := range append([]string{table}, cols...) {
		if err := sqldialect.ValidIdent(n); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	c := sqlConfig{maxRows: 1000}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if c.dialect == sqldialect.Unknown {
		d, err := sqldialect.Detect(db)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		c.dialect = d
	}
	return &SQLWriter[T]{
		db: db, d: c.dialect, table: table, cols: append([]string{}, cols...), row: row,
		maxRows: max(1, min(c.maxRows, c.dialect.MaxParams()/len(cols))),
		stmts:   map[int]*sql.Stmt{},
	}, nil
}

// Inserted returns how many rows the writer has inserted so far; rows
// skipped as duplicates are not counted.
func (w *SQLWriter[T]) Inserted() int64 { return w.inserted.Load() }

// Write inserts batch, in order, chunked by WithMaxRows.
func (w *SQLWriter[T]) Write(ctx context.Context, batch []T) error {
	args := make([]any, 0, len(batch)*len(w.cols))
	var bad []error
	for i, it := range batch {
		vals, err := w.row(it)
		if err == nil && len(vals) != len(w.cols) {
			err = fmt.Errorf("row has %d values for %d columns", len(vals), len(w.cols))
		}
		if err != nil {
			bad = append(bad, &ItemError{Index: i, Err: err})
			continue
		}
		for _, v := range vals {
			if t, ok := v.(time.Time); ok {
				v = w.d.Time(t)
			}
			args = append(args, v)
		}
	}
	if len(bad) > 0 {
		return errors.Join(bad...)
	}
	n := len(w.cols)
	for start := 0; start < len(batch); start += w.maxRows {
		rows := min(w.maxRows, len(batch)-start)
		if err := w.exec(ctx, rows, args[start*n:(start+rows)*n]); err != nil {
			if sqldialect.IsPermanent(err) {
				return Permanent(fmt.Errorf("writebehind: insert into %s: %w", w.table, err))
			}
			return fmt.Errorf("writebehind: insert into %s: %w", w.table, err)
		}
	}
	return nil
}

func (w *SQLWriter[T]) exec(ctx context.Context, rows int, args []any) error {
	st, err := w.stmt(ctx, rows)
	if err != nil {
		return err
	}
	res, err := st.ExecContext(ctx, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err == nil {
		w.inserted.Add(n)
	}
	return nil
}

func (w *SQLWriter[T]) stmt(ctx context.Context, rows int) (*sql.Stmt, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st, ok := w.stmts[rows]; ok {
		return st, nil
	}
	st, err := w.db.PrepareContext(ctx, w.d.InsertIgnore(w.table, w.cols, rows))
	if err != nil {
		return nil, err
	}
	if len(w.stmts) >= 8 { // odd-sized tail batches: keep the cache small
		for k, s := range w.stmts {
			s.Close()
			delete(w.stmts, k)
		}
	}
	w.stmts[rows] = st
	return st, nil
}

// Close closes the prepared statements. The writer may be used again
// afterwards (statements are prepared anew).
func (w *SQLWriter[T]) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	for k, s := range w.stmts {
		errs = append(errs, s.Close())
		delete(w.stmts, k)
	}
	return errors.Join(errs...)
}
