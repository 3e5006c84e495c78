//go:build integration

package store_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A rebuild reads a family's usage rows of the accepted months and of
// the dedupe window, not its whole history: for a page of three families
// with 1,000 rows of earlier months each beside 10 of the accepted one,
// MariaDB reads about the 30 (counted by the session's handler reads),
// and only they are restored — also when the page's families hold the
// whole table, where a BETWEEN over the page is read by a full scan.
func TestReadFamiliesSkipsHistoryMariaDB(t *testing.T) {
	e := newEnv(t, openMySQL)
	e.DB.SetMaxOpenConns(1) // one session: its handler counts are the store's reads
	fids := []int64{7, 8, 9}
	for _, fid := range fids {
		e.Family(t, fid)
	}
	month := time.Date(start.Year(), start.Month(), 1, 0, 0, 0, 0, time.UTC)
	var b strings.Builder
	row := func(fid int64, id string, at time.Time, bytes int64) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		ts := func(t time.Time) string { return t.UTC().Format("'2006-01-02 15:04:05.000'") }
		fmt.Fprintf(&b, "('%s',%d,%d,'web',%d,'ALLOWED',0,'',%s,%s)", id, fid, fid*10+1, bytes, ts(at), ts(at.Add(time.Second)))
	}
	insert := func() {
		t.Helper()
		if _, err := e.DB.ExecContext(e.Ctx, `INSERT INTO usage_record (event_id, family_id, customer_id, app_id, bytes_used,
			process_result, remaining_after, rule, event_time, created_at) VALUES `+b.String()); err != nil {
			t.Fatal(err)
		}
		b.Reset()
	}
	for _, fid := range fids {
		for i := range 1000 { // the six months before the accepted one
			row(fid, fmt.Sprint("old-", fid, "-", i), month.AddDate(0, -6, 0).Add(time.Duration(i)*time.Hour), 1000)
			if i%500 == 499 {
				insert()
			}
		}
		for i := range 10 {
			row(fid, fmt.Sprint("new-", fid, "-", i), month.Add(time.Duration(i)*time.Hour), 1)
		}
		insert()
	}

	reads := func() int64 {
		t.Helper()
		rows, err := e.DB.QueryContext(e.Ctx, "SHOW SESSION STATUS LIKE 'Handler_read%'")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var n int64
		for rows.Next() {
			var name string
			var v int64
			if err := rows.Scan(&name, &v); err != nil {
				t.Fatal(err)
			}
			n += v
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := reads()
	states, bad, err := e.S.ReadFamilies(e.Ctx, monthWindow{month}, fids, true) // a span, as the sweep reads
	read := reads() - before
	if err != nil || len(bad) != 0 {
		t.Fatalf("ReadFamilies: %v %v", bad, err)
	}
	for _, fid := range fids {
		var used int64
		for _, u := range states[fid].Usage {
			used += u.Bytes
		}
		if used != 10 {
			t.Errorf("family %d: restored usage %d, want the accepted month's 10", fid, used)
		}
	}
	// The plan, members, top-ups and re-arms take a few dozen reads; the
	// families' history alone would take 3,000.
	if read > 500 {
		t.Errorf("ReadFamilies made %d handler reads for three families with 1,010 usage rows each, 10 of them to read", read)
	}
	t.Logf("%d handler reads", read)
}
