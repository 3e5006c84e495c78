package service

import (
	"context"
	"testing"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/charging"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/recovery"
)

// The same traffic is charged once (doc/wire-format.md, "Charged once"):
// with DPCS_GRANT_CHARGED naming VIDEO, member 11's video is charged by its
// grant's reports; a CDR of the same traffic, through POST /decisions or
// Kafka, is judged and recorded (bytesUsed 0, grantChargedBytes what it
// reported) but charges nothing, while an event of other traffic charges
// as before. SQL agrees with Redis afterwards.
func TestGrantChargedTrafficIsChargedOnce(t *testing.T) {
	r := newRecoveryRig(t)
	covered, err := charging.ParseGrantCharged("VIDEO")
	if err != nil {
		t.Fatal(err)
	}
	r.h.startWorkers(r.db, judge.WithStateGuard(r.rec), judge.WithGrantCharged(covered))
	ctx := r.h.Ctx
	dec, err := judge.NewDecisions(r.state(t, judge.WithMarkStore(recovery.NewGenerations(r.st))), r.h.KafkaOpts(),
		judge.WithStateGuard(r.rec), judge.WithClock(r.h.Clock), judge.WithTimeout(5*time.Second), judge.WithGrantCharged(covered))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dec.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	used := func() int64 {
		t.Helper()
		st, err := r.h.Engine.Family(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		return st.Used
	}
	step := func(id string, u, req int64) quota.GrantResult {
		t.Helper()
		rs, err := dec.Charge(ctx, []quota.GrantOp{{ID: id, GrantID: "sess-v/10", FamilyID: 1, CustomerID: 11,
			Category: policy.CategoryVideo, Used: u, Requested: req, At: r.h.Now}})
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return rs[0]
	}
	decide := func(id, app string, bytes int64) quota.Result {
		t.Helper()
		res, err := dec.Decide(ctx, []envelope.Envelope[envelope.UsagePayload]{envelope.New(id, r.h.Now,
			envelope.UsagePayload{FamilyID: 1, CustomerID: 11, AppID: app, BytesUsed: bytes})})
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return res[0]
	}

	step("v1", 0, 4*mb)
	if res := step("v2", 3*mb, 4*mb); res.Charged != 3*mb {
		t.Fatalf("the grant's report: %+v", res)
	}
	if got := used(); got != 3*mb {
		t.Fatalf("used %d after the grant's report, want 3 MB", got)
	}
	// The CDR of the video the grant charged: judged, charged nothing.
	if res := decide("cdr-video", "com.youtube.app", 3*mb); res.Decision != policy.Allowed {
		t.Fatalf("the video's CDR: %+v", res)
	}
	if got := used(); got != 3*mb {
		t.Fatalf("used %d after the video's CDR: the grant charged it already, want 3 MB", got)
	}
	// Other traffic's event charges.
	decide("cdr-game", "com.roblox.client", 1*mb)
	if got := used(); got != 4*mb {
		t.Fatalf("used %d after a game's event, want 4 MB", got)
	}
	// The same through Kafka.
	r.h.Produce(r.h.Usage("cdr-video-2", 1, 11, 2*mb, "com.tiktok.app", r.h.Now),
		r.h.Usage("cdr-web", 1, 11, 1*mb, "com.android.chrome", r.h.Now))
	waitCount(t, r, `SELECT COUNT(*) FROM usage_record WHERE event_id IN ('cdr-video', 'cdr-game', 'cdr-video-2', 'cdr-web')`, 4)
	if got := used(); got != 5*mb {
		t.Fatalf("used %d after Kafka's video and web events, want 5 MB (the web's)", got)
	}
	for id, want := range map[string]int64{"cdr-video": 0, "cdr-video-2": 0, "cdr-game": 1 * mb, "cdr-web": 1 * mb} {
		var got int64
		if err := r.db.QueryRow(`SELECT bytes_used FROM usage_record WHERE event_id = ?`, id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("usage_record %s: bytes_used %d, want %d", id, got, want)
		}
	}
	r.rec.Wait()
	r.h.checkInvariants(r.db)
}
