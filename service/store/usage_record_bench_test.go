//go:build integration

package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/writebehind"
)

var benchSeq atomic.Int64

func benchRows(n int) []store.UsageRecord {
	base := int(benchSeq.Add(int64(n))) - n
	out := usageRows(n, base)
	for i := range out {
		out[i].EventID = fmt.Sprintf("bench_%d_%09d", time.Now().UnixNano(), base+i)
	}
	return out
}

// usageMariaDB is a fresh MariaDB database with usage_record.
func usageMariaDB(b *testing.B) *sql.DB {
	b.Helper()
	db := mysqlDB(b)
	if err := store.MigrateUsage(context.Background(), db); err != nil {
		b.Fatal(err)
	}
	return db
}

// BenchmarkUsageWriterMariaDB compares rows/s into usage_record on MariaDB
// (DPCS_TEST_MYSQL_DSN) through a writebehind.Sink + the usage writer with a
// raw multi-row INSERT IGNORE loop of the same columns, one writer each, in
// the same run.
func BenchmarkUsageWriterMariaDB(b *testing.B) {
	for _, size := range []int{100, 500, 1000} {
		b.Run(fmt.Sprintf("raw/batch=%d", size), func(b *testing.B) {
			db := usageMariaDB(b)
			cols := store.UsageColumns
			st, err := db.Prepare(sqldialect.MySQL.InsertIgnore("usage_record", cols, size))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			rows := benchRows(b.N)
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < len(rows); i += size {
				chunk := rows[i:min(i+size, len(rows))]
				args := make([]any, 0, len(chunk)*len(cols))
				for _, u := range chunk {
					args = append(args, u.EventID, u.FamilyID, u.CustomerID, u.AppID, u.BytesUsed,
						u.ProcessResult, u.RemainingAfter, u.Rule, u.EventTime.UTC(),
						u.TotalBytes, u.DailyUsed, u.MonthlyUsed, u.ThrottleKbps, store.FormatCrossed(u.Crossed), "")
				}
				if len(chunk) == size {
					_, err = st.Exec(args...)
				} else {
					_, err = db.Exec(sqldialect.MySQL.InsertIgnore("usage_record", cols, len(chunk)), args...)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
		})
		b.Run(fmt.Sprintf("sink/batch=%d", size), func(b *testing.B) {
			db := usageMariaDB(b)
			w, err := store.NewUsageWriter(db)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			s, err := writebehind.New[store.UsageRecord](w, writebehind.WithBatchSize(size))
			if err != nil {
				b.Fatal(err)
			}
			rows := benchRows(b.N)
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for _, u := range rows {
				if err := s.Add(ctx, u); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Close(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
			if w.Inserted() != int64(b.N) {
				b.Fatalf("inserted %d of %d", w.Inserted(), b.N)
			}
		})
	}
}

// BenchmarkUsageIndexesMariaDB is MariaDB's CPU per row the usage writer
// inserts into usage_record as migrated, beside the same table with the
// index earlier releases had (store.retiredIndexes), in the same run
// (benchInserts: batches of 500 rows of random families).
func BenchmarkUsageIndexesMariaDB(b *testing.B) {
	for _, c := range []struct {
		name  string
		index bool
	}{{"as-migrated", false}, {"with-retired-index", true}} {
		b.Run(c.name, func(b *testing.B) {
			db := usageMariaDB(b)
			if c.index {
				if _, err := db.Exec("CREATE INDEX " + retiredIndex + " ON usage_record (customer_id, event_time)"); err != nil {
					b.Fatal(err)
				}
			}
			benchInserts(b, db, func(n int) []store.UsageRecord { return benchRows(n) })
		})
	}
}

// BenchmarkUsageIDsMariaDB is MariaDB's CPU per row the usage writer
// inserts with random (version 4) and time-ordered (version 7) event ids,
// each into a fresh usage_record (benchInserts): usage_record's unique
// index on event_id takes a random id anywhere in the index, a
// time-ordered one at its end. The difference shows once the index
// outgrows the buffer pool (doc/benchmarks.md: -benchtime 3000000x with
// scripts/servers.sh' 256 MiB).
func BenchmarkUsageIDsMariaDB(b *testing.B) {
	for _, c := range []struct {
		name string
		id   func() (uuid.UUID, error)
	}{{"random-v4", uuid.NewRandom}, {"time-ordered-v7", uuid.NewV7}} {
		b.Run(c.name, func(b *testing.B) {
			seq := 0
			benchInserts(b, usageMariaDB(b), func(n int) []store.UsageRecord {
				rows := usageRows(n, seq)
				seq += n
				for j := range rows {
					u, err := c.id()
					if err != nil {
						b.Fatal(err)
					}
					rows[j].EventID = "evt_" + u.String()
				}
				return rows
			})
		})
	}
}

// benchInserts writes b.N rows into db's usage_record through the usage
// writer, in batches of 500 that next makes (next(n) returns n rows; their
// families and members are then drawn at random among 80,000 families),
// and reports rows/s and, when DPCS_BENCH_SQL_PID names mariadbd, its CPU
// per row (sql-µs/row).
func benchInserts(b *testing.B, db *sql.DB, next func(n int) []store.UsageRecord) {
	w, err := store.NewUsageWriter(db, writebehind.WithMaxRows(500))
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	r := rand.New(rand.NewPCG(1, uint64(b.N)))
	ctx := context.Background()
	pid := os.Getenv("DPCS_BENCH_SQL_PID")
	sql0 := testenv.PIDCPU(b, pid)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i += 500 {
		rows := next(min(500, b.N-i))
		for j := range rows {
			f := r.Int64N(80_000) + 1
			rows[j].FamilyID, rows[j].CustomerID = f, f*4+r.Int64N(4)
		}
		if err := w.Write(ctx, rows); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
	if pid != "" {
		b.ReportMetric(float64((testenv.PIDCPU(b, pid)-sql0).Microseconds())/float64(b.N), "sql-µs/row")
	}
}
