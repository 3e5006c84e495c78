package store_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

func TestJudgedSinceSQLite(t *testing.T) { testJudgedSince(t, newEnv(t, openSQLite)) }

// testJudgedSince writes usage_record rows the way the write-behind does
// (created_at set by the database) and with chosen created_at values, and
// reads back those of a family judged or happened since an instant.
func testJudgedSince(t *testing.T, e *env) {
	d, err := sqldialect.Detect(e.DB)
	if err != nil {
		t.Fatal(err)
	}
	w, err := store.NewUsageWriter(e.DB)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	since := now.Add(-time.Hour)
	// old writes a row with a chosen created_at, as a row written earlier;
	// in MySQL created_at is in the session's time zone.
	created := "?"
	if d == sqldialect.MySQL {
		created = "CONVERT_TZ(?, '+00:00', @@session.time_zone)"
	}
	old := func(id string, fid int64, eventTime, createdAt time.Time) {
		t.Helper()
		if _, err := e.DB.ExecContext(e.Ctx, `INSERT INTO usage_record (event_id, family_id, customer_id, app_id, bytes_used,
			process_result, remaining_after, rule, event_time, created_at) VALUES (?, ?, ?, 'web', 100, 'ALLOWED', 900, '', ?, `+created+`)`,
			id, fid, fid*10+1, d.Time(eventTime), d.Time(createdAt)); err != nil {
			t.Fatal(err)
		}
	}
	write := func(rows ...store.UsageRecord) {
		t.Helper()
		if err := w.Write(e.Ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	old("evt_old", 1, now.Add(-48*time.Hour), now.Add(-47*time.Hour))                                     // neither: left out
	old("evt_happened", 1, now.Add(-30*time.Minute), now.Add(-2*time.Hour))                               // happened since (created_at from a skewed clock)
	old("evt_boundary", 1, since, now.Add(-3*time.Hour))                                                  // happened exactly at since
	old("evt_other_family", 2, now.Add(-time.Minute), now.Add(-time.Minute))                              // another family
	write(store.UsageRecord{EventID: "evt_late", FamilyID: 1, CustomerID: 12, AppID: "web", BytesUsed: 5, // judged now, happened 2 days ago
		ProcessResult: "BLOCKED_LIMIT_DAILY", RemainingAfter: 800, Rule: "LIMIT:DATA:DAILY", EventTime: now.Add(-48 * time.Hour),
		TotalBytes: 1000, DailyUsed: 70, MonthlyUsed: 90})
	write(store.UsageRecord{EventID: "evt_full", FamilyID: 1, CustomerID: 11, AppID: "web", BytesUsed: 300,
		ProcessResult: "ALLOWED", RemainingAfter: 200, EventTime: now, TotalBytes: 1000, DailyUsed: 300, MonthlyUsed: 400,
		ThrottleKbps: 512, Crossed: []envelope.Crossing{{Percent: 30, Arm: 1}, {Percent: 20, Arm: 2}}})
	done := time.Now().UTC()

	got, err := e.S.JudgedSince(e.Ctx, 1, since)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.JudgedRow{
		{EventID: "evt_happened", CustomerID: 11, Bytes: 100, Decision: policy.Allowed, Remaining: 900,
			EventTime: now.Add(-30 * time.Minute), CreatedAt: now.Add(-2 * time.Hour)},
		{EventID: "evt_boundary", CustomerID: 11, Bytes: 100, Decision: policy.Allowed, Remaining: 900,
			EventTime: since, CreatedAt: now.Add(-3 * time.Hour)},
		{EventID: "evt_late", CustomerID: 12, Bytes: 5, Decision: policy.BlockedLimitDaily, Rule: "LIMIT:DATA:DAILY",
			Remaining: 800, Total: 1000, DailyUsed: 70, MonthlyUsed: 90, EventTime: now.Add(-48 * time.Hour)},
		{EventID: "evt_full", CustomerID: 11, Bytes: 300, Decision: policy.Allowed, Remaining: 200, Total: 1000,
			DailyUsed: 300, MonthlyUsed: 400, ThrottleKbps: 512, Crossed: []envelope.Crossing{{Percent: 30, Arm: 1}, {Percent: 20, Arm: 2}},
			EventTime: now},
	}
	// The database's clock stamps the rows the writer wrote: about now.
	for i := range got {
		if got[i].EventID != "evt_late" && got[i].EventID != "evt_full" {
			continue
		}
		if c := got[i].CreatedAt; c.Before(now.Add(-5*time.Second)) || c.After(done.Add(5*time.Second)) || c.Location() != time.UTC {
			t.Errorf("%s created at %v, want about %v (UTC)", got[i].EventID, c, now)
		}
		got[i].CreatedAt = time.Time{}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JudgedSince (-want +got):\n%s", diff)
	}

	if rows, err := e.S.JudgedSince(e.Ctx, 1, now.Add(time.Hour)); err != nil || len(rows) != 0 {
		t.Errorf("JudgedSince(an hour ahead) = %v, %v; want none", rows, err)
	}
	if rows, err := e.S.JudgedSince(e.Ctx, 3, since); err != nil || len(rows) != 0 {
		t.Errorf("JudgedSince(family without rows) = %v, %v; want none", rows, err)
	}
	_, err = e.S.JudgedSince(e.Ctx, 0, since)
	wantErr(t, "family 0", err, store.ErrInvalid)
	_, err = e.S.JudgedSince(e.Ctx, 1, time.Time{})
	wantErr(t, "zero since", err, store.ErrInvalid)

	// A crossed value no writer wrote is an error, not a silent drop.
	if _, err := e.DB.ExecContext(e.Ctx, `UPDATE usage_record SET crossed = '30:x' WHERE event_id = 'evt_full'`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.S.JudgedSince(e.Ctx, 1, since); err == nil {
		t.Error("JudgedSince read a malformed crossed column without error")
	}
}
