package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/service"
)

// The inbox check counts alerts from their payloads, so it catches an
// alert stored twice under different dedupe keys, and it tells a re-armed
// threshold (period "…#2") from a repeat.
func TestCheckThresholdAlertsOnce(t *testing.T) {
	ctx := context.Background()
	db, err := service.Config{SQLitePath: filepath.Join(t.TempDir(), "inbox.db")}.SQL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	inbox, err := notify.NewSQLInbox(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := inbox.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	add := func(id string, fid int64, pct int, period, key string) {
		t.Helper()
		p, _ := json.Marshal(envelope.ThresholdAlert{FamilyID: fid, ThresholdPercent: pct, Message: "m", Period: period})
		if _, _, err := inbox.Add(ctx, notify.Notification{EventID: id, DedupeKey: key, FamilyID: fid,
			Kind: envelope.SubThresholdAlert, Title: "t", Body: "b", Payload: p, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	add("a", 1, 50, "2026-02", notify.ThresholdKey(1, 50, "2026-02"))
	add("b", 1, 30, "2026-02", notify.ThresholdKey(1, 30, "2026-02"))
	add("c", 1, 50, "2026-02#2", notify.ThresholdKey(1, 50, "2026-02#2")) // re-armed by a top-up
	add("d", 2, 50, "", notify.ThresholdKey(2, 50, "2026-02"))            // period from the key
	if err := CheckThresholdAlertsOnce(ctx, db, []int64{1, 2}); err != nil {
		t.Fatalf("clean inbox: %v", err)
	}
	add("e", 1, 30, "2026-02", "broken-dedupe-key") // the same announcement again
	add("f", 3, 10, "2026-02", "other-family")      // not asked about
	err = CheckThresholdAlertsOnce(ctx, db, []int64{1, 2})
	if err == nil || !strings.Contains(err.Error(), "family 1 30% 2026-02: announced 2 times") {
		t.Fatalf("repeated alert: %v", err)
	}
	got, err := ThresholdAlerts(ctx, db, []int64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	want := map[AlertKey]int{{1, 50, "2026-02"}: 1, {1, 30, "2026-02"}: 2, {1, 50, "2026-02#2"}: 1, {2, 50, "2026-02"}: 1, {3, 10, "2026-02"}: 1}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ThresholdAlerts (-want +got):\n%s", d)
	}
}
