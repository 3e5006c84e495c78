package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/service/store"
)

// testRecentApps: the apps of the newest usage records the catalog does
// not name, most used first, with how much and by how many families; apps
// the catalog holds are left out, a removed one is back in, and only the
// newest n records are read.
func testRecentApps(t *testing.T, e *env) {
	w, err := store.NewUsageWriter(e.DB)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	var rows []store.UsageRecord
	add := func(app string, fid int64, bytes int64) {
		rows = append(rows, store.UsageRecord{EventID: fmt.Sprintf("evt_%d", len(rows)), FamilyID: fid, CustomerID: fid*10 + 1, AppID: app,
			BytesUsed: bytes, ProcessResult: "ALLOWED", EventTime: at.Add(time.Duration(len(rows)) * time.Minute)})
	}
	add("kr.old.app", 1, 1) // only the oldest: outside the newest 5 below
	add("com.zepeto.global", 1, 100)
	add("com.youtube.app", 1, 50) // in the catalog
	add("com.zepeto.global", 2, 200)
	add("kr.new.app", 2, 10)
	add("", 2, 10) // no app
	if err := w.Write(e.Ctx, rows); err != nil {
		t.Fatal(err)
	}
	got, err := e.S.RecentApps(e.Ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.SeenApp{
		{AppID: "com.zepeto.global", Events: 2, Bytes: 300, Families: 2, LastSeen: at.Add(3 * time.Minute)},
		{AppID: "kr.new.app", Events: 1, Bytes: 10, Families: 1, LastSeen: at.Add(4 * time.Minute)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("recent apps (-want +got):\n%s", diff)
	}
	if err := e.S.DeleteApp(e.Ctx, "com.youtube.app", admin); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.S.RecentApps(e.Ctx, 6); len(got) != 4 || got[0].AppID != "com.zepeto.global" {
		t.Errorf("after YouTube left the catalog, over 6 records: %+v", got)
	}
	if _, err := e.S.RecentApps(e.Ctx, 0); err == nil {
		t.Error("RecentApps(0) accepted")
	}
}
