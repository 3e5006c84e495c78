package service

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/internal/testenv/storetest"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/service/store"
)

func TestParseWeeklyAt(t *testing.T) {
	for in, want := range map[string]*WeeklyAt{"MON 09:00": {time.Monday, 540}, "sun 23:59": {time.Sunday, 1439}, "off": nil, "OFF": nil} {
		got, err := ParseWeeklyAt(in)
		if err != nil || !cmp.Equal(want, got) {
			t.Errorf("ParseWeeklyAt(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MON", "MON 9:00", "MON 24:00", "XYZ 09:00", "MON 09:60", "09:00 MON"} {
		if _, err := ParseWeeklyAt(bad); err == nil {
			t.Errorf("ParseWeeklyAt(%q) accepted", bad)
		}
	}
	at := WeeklyAt{time.Monday, 540}
	seoul := storetest.Seoul
	tue := time.Date(2026, 2, 10, 12, 0, 0, 0, seoul)
	if got, want := at.Next(tue, seoul), time.Date(2026, 2, 16, 9, 0, 0, 0, seoul); !got.Equal(want) {
		t.Errorf("Next after a Tuesday = %v, want %v", got, want)
	}
	mon := time.Date(2026, 2, 16, 9, 0, 0, 0, seoul)
	if got, want := at.Next(mon, seoul), time.Date(2026, 2, 23, 9, 0, 0, 0, seoul); !got.Equal(want) {
		t.Errorf("Next at the time itself = %v, want the week after's %v", got, want)
	}
	from, to, week := WeekBefore(mon, seoul)
	if !from.Equal(time.Date(2026, 2, 9, 0, 0, 0, 0, seoul)) || !to.Equal(time.Date(2026, 2, 16, 0, 0, 0, 0, seoul)) || week != "2026-W07" {
		t.Errorf("WeekBefore(Monday 16th) = %v, %v, %s", from, to, week)
	}
	if from, _, week := WeekBefore(time.Date(2026, 2, 15, 23, 0, 0, 0, seoul), seoul); !from.Equal(time.Date(2026, 2, 2, 0, 0, 0, 0, seoul)) || week != "2026-W06" {
		t.Errorf("WeekBefore(Sunday 15th) = %v, %s", from, week)
	}
}

// fakeLive records what the job published live.
type fakeLive struct {
	mu    sync.Mutex
	notes []notify.Notification
}

func (f *fakeLive) Publish(_ context.Context, n notify.Notification) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notes = append(f.notes, n)
	return 1, nil
}

// fakeChannel records what the job pushed.
type fakeChannel struct{ fakeLive }

func (f *fakeChannel) Send(ctx context.Context, n notify.Notification) error {
	_, err := f.Publish(ctx, n)
	return err
}

// lastWeek is a Wednesday evening of 2026-W06 in Seoul: the week the
// tests' Monday runs sum.
var lastWeek = time.Date(2026, 2, 4, 20, 0, 0, 0, storetest.Seoul)

// weeklyEnv is a migrated SQLite store (families made with e.Family), its
// inbox and a usage writer for the week's records.
func weeklyEnv(t *testing.T) (*storetest.Env, *notify.SQLInbox, *store.UsageWriter) {
	t.Helper()
	e := storetest.New(t, testenv.SQLite(t))
	if err := Migrate(e.Ctx, e.DB); err != nil {
		t.Fatal(err)
	}
	inbox, err := notify.NewSQLInbox(e.DB)
	if err != nil {
		t.Fatal(err)
	}
	w, err := store.NewUsageWriter(e.DB)
	if err != nil {
		t.Fatal(err)
	}
	return e, inbox, w
}

// TestWeeklySummaries: a family's week (its members' use and blocks, the
// requests made in it) reaches its owners' inbox, live and pushed; once per
// family and week however often and by however many processes it runs; a
// family with a quiet week gets none.
func TestWeeklySummaries(t *testing.T) {
	e, inbox, w := weeklyEnv(t)
	e.Family(t, 1) // owner 11, child 12
	e.Family(t, 2) // quiet
	seoul := storetest.Seoul
	rec := func(id string, cid, bytes int64, result string, at time.Time) store.UsageRecord {
		return store.UsageRecord{EventID: id, FamilyID: 1, CustomerID: cid, AppID: "com.youtube.app", BytesUsed: bytes, ProcessResult: result, EventTime: at}
	}
	if err := w.Write(e.Ctx, []store.UsageRecord{
		rec("a", 12, 300<<20, "ALLOWED", lastWeek), rec("b", 12, 1, "BLOCKED_TIME", lastWeek), rec("c", 12, 1, "BLOCKED_TIME", lastWeek),
		rec("d", 11, 100<<20, "ALLOWED", lastWeek),
		rec("e", 12, 999<<20, "ALLOWED", lastWeek.AddDate(0, 0, 7)), // this week: not summed
	}); err != nil {
		t.Fatal(err)
	}
	e.Clock.Add(lastWeek.Sub(e.Clock.Now()))
	if _, _, err := e.S.CreateDataRequest(e.Ctx, store.NewDataRequest{FamilyID: 1, CustomerID: 12, AmountBytes: 100 << 20, MaxAmount: 1 << 30, MaxPending: 5}); err != nil {
		t.Fatal(err)
	}
	live, push := &fakeLive{}, &fakeChannel{}
	job := func() *WeeklySummaries {
		j, err := NewWeeklySummaries(e.S, inbox, live, push, WeeklyAt{time.Monday, 540}, seoul, nil)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	monday := time.Date(2026, 2, 9, 9, 0, 0, 0, seoul)
	var wg sync.WaitGroup
	reports := make([]WeeklyReport, 2)
	for i := range reports { // two servers at once
		wg.Go(func() {
			var err error
			if reports[i], err = job().Run(e.Ctx, monday); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if sent := reports[0].Sent + reports[1].Sent; sent != 1 || reports[0].Week != "2026-W06" {
		t.Errorf("two runs at once: %+v, want one summary of 2026-W06 sent", reports)
	}
	if r, err := job().Run(e.Ctx, monday.Add(time.Hour)); err != nil || r.Sent != 0 || r.Families != 2 {
		t.Errorf("a later run: %+v, %v; want nothing sent again", r, err)
	}
	if len(live.notes) != 1 || len(push.notes) != 1 {
		t.Fatalf("told live %d times, pushed %d times; want once each", len(live.notes), len(push.notes))
	}

	// In the owner's inbox, not the child's.
	rows, err := inbox.List(e.Ctx, notify.Query{FamilyID: 1, Viewer: notify.Filter{MemberID: 11, Role: notify.RoleOwner}})
	if err != nil || len(rows) != 1 {
		t.Fatalf("owner's inbox: %+v, %v", rows, err)
	}
	n := rows[0]
	if n.Kind != notify.KindWeeklySummary || n.Title != "지난주 가족 데이터 요약" ||
		n.Body != "2/2–2/8 가족이 400.0 MB를 썼습니다. m12 300.0 MB (차단 2번), m11 100.0 MB. 부탁 1건 (승인 0, 거절 0)." || n.DeliveredAt == nil {
		t.Errorf("the summary: %+v", n)
	}
	var s notify.WeeklySummary
	if err := json.Unmarshal(n.Payload, &s); err != nil {
		t.Fatal(err)
	}
	want := notify.WeeklySummary{FamilyID: 1, Week: "2026-W06", From: "2026-02-02", To: "2026-02-08", UsedBytes: 400 << 20, Blocked: 2,
		Members: []notify.WeeklySummaryMember{{CustomerID: 12, Name: "m12", Role: "MEMBER", UsedBytes: 300 << 20, Blocked: 2},
			{CustomerID: 11, Name: "m11", Role: "OWNER", UsedBytes: 100 << 20}}}
	want.Requests.Made = 1
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("payload (-want +got):\n%s", diff)
	}
	if rows, err := inbox.List(e.Ctx, notify.Query{FamilyID: 1, Viewer: notify.Filter{MemberID: 12, Role: notify.RoleMember}}); err != nil || len(rows) != 0 {
		t.Errorf("the child's inbox: %+v, %v; want no summary", rows, err)
	}
	if rows, _ := inbox.List(e.Ctx, notify.Query{FamilyID: 2, Viewer: notify.Filter{MemberID: 21, Role: notify.RoleOwner}}); len(rows) != 0 {
		t.Errorf("a quiet family's inbox: %+v", rows)
	}
	if (notify.Filter{MemberID: 12, Role: notify.RoleMember}).Sees(n) {
		t.Error("a member sees the weekly summary live")
	}

	// Started after the week's time, the job sends what is missing (once:
	// nothing here) after its catch-up delay, and stops when closed.
	j := job()
	j.now, j.catchUp = func() time.Time { return monday.Add(2 * time.Hour) }, 0
	j.Start()
	j.Close()
	j.Close()
}

// The ranges a weekly run walks cover every id from the smallest on,
// each once, in at most n ranges, the last open-ended.
func TestIDSegments(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		lo := rapid.Int64Range(1, 1<<40).Draw(t, "lo")
		hi := lo + rapid.Int64Range(0, 1<<20).Draw(t, "span")
		n := rapid.IntRange(1, 100).Draw(t, "n")
		segs := idSegments(lo, hi, n)
		if len(segs) == 0 || len(segs) > n {
			t.Fatalf("%d ranges for n = %d", len(segs), n)
		}
		if segs[0].first != lo || segs[len(segs)-1].last != math.MaxInt64 {
			t.Fatalf("ranges %v do not run from %d on", segs, lo)
		}
		for i := range segs {
			if segs[i].first > segs[i].last || segs[i].first > hi {
				t.Fatalf("range %d of %v is empty or beyond %d", i, segs, hi)
			}
			if i > 0 && segs[i].first != segs[i-1].last+1 {
				t.Fatalf("ranges %d and %d of %v are not adjacent", i-1, i, segs)
			}
		}
		for i := 1; i < len(segs)-1; i++ { // about equal: the closed ones alike
			if segs[i].last-segs[i].first != segs[0].last-segs[0].first {
				t.Fatalf("ranges %v are not alike", segs)
			}
		}
		if span := hi - lo + 1; span >= int64(2*n) && len(segs) < n/2 {
			t.Fatalf("%d ranges for %d ids, n = %d", len(segs), span, n)
		}
	})
}

// TestWeeklySummariesManyFamilies: servers running the week at once send
// each family's summary once between them; each walks every family, and
// what one finds another stored first it skips without summing.
func TestWeeklySummariesManyFamilies(t *testing.T) {
	e, inbox, uw := weeklyEnv(t)
	seoul := storetest.Seoul
	const families = 150
	var recs []store.UsageRecord
	for fid := int64(1); fid <= families; fid++ {
		e.Family(t, fid*7) // sparse ids
		recs = append(recs, store.UsageRecord{EventID: fmt.Sprint("u", fid), FamilyID: fid * 7, CustomerID: fid*70 + 2,
			AppID: "com.youtube.app", BytesUsed: fid << 20, ProcessResult: "ALLOWED", EventTime: lastWeek})
	}
	if err := uw.Write(e.Ctx, recs); err != nil {
		t.Fatal(err)
	}
	monday := time.Date(2026, 2, 9, 9, 0, 0, 0, seoul)
	live := &fakeLive{}
	reports := make([]WeeklyReport, 3)
	var wg sync.WaitGroup
	for i := range reports {
		wg.Go(func() {
			j, err := NewWeeklySummaries(e.S, inbox, live, nil, WeeklyAt{time.Monday, 540}, seoul, nil)
			if err != nil {
				t.Error(err)
				return
			}
			if reports[i], err = j.Run(e.Ctx, monday); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	sent := 0
	for _, r := range reports {
		sent += r.Sent
		if r.Families != families || r.Failed != 0 || r.Sent+r.Skipped > families {
			t.Errorf("a run: %+v; want every one of %d families walked", r, families)
		}
	}
	// Walked in random orders of ranges, the runs rarely sum the same
	// family: of the 300 visits beyond each family's first, nearly all
	// find it stored. (Walked in id order, the runs went in step and
	// summed nearly every family three times.)
	if skipped := reports[0].Skipped + reports[1].Skipped + reports[2].Skipped; skipped < families {
		t.Errorf("the three runs skipped %d families stored by another; want most of the %d visits after the first", skipped, 2*families)
	}
	if sent != families || len(live.notes) != families {
		t.Errorf("%d summaries sent, %d told live by three runs at once; want %d", sent, len(live.notes), families)
	}
	seen := map[int64]bool{}
	for _, n := range live.notes {
		if seen[n.FamilyID] {
			t.Errorf("family %d told twice", n.FamilyID)
		}
		seen[n.FamilyID] = true
	}
	// A later run finds every summary stored before and sums none.
	j, err := NewWeeklySummaries(e.S, inbox, live, nil, WeeklyAt{time.Monday, 540}, seoul, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := j.Run(e.Ctx, monday.Add(time.Hour)); err != nil || r.Skipped != families || r.Sent != 0 {
		t.Errorf("a later run: %+v, %v; want all %d skipped", r, err, families)
	}
}
