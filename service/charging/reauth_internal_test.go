package charging

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/service/store"
)

// A REAUTHORIZATION names each rating group the session holds once, also
// when it holds one on two UPFs (ReauthorizationDetails names no UPF).
func TestReauthNamesEachRatingGroupOnce(t *testing.T) {
	sess := store.ChargingSession{Grants: []store.ChargingGrant{
		{RatingGroup: 10, UPFID: "upf-a"}, {RatingGroup: 20}, {RatingGroup: 10, UPFID: "upf-b"}}}
	var got ChargingNotifyRequest
	if err := json.Unmarshal(reauthBody(sess), &got); err != nil {
		t.Fatal(err)
	}
	var rgs []uint32
	for _, d := range got.ReauthorizationDetails {
		rgs = append(rgs, *d.RatingGroup)
	}
	if got.NotificationType != NotificationReauthorization || !cmp.Equal(rgs, []uint32{10, 20}) {
		t.Errorf("notification = %s %v, want REAUTHORIZATION of 10 and 20", got.NotificationType, rgs)
	}
}

// A REAUTHORIZATION queued behind a busy destination takes in the rating
// groups of the next one for the same session: one naming some of them
// (grants to reclaim) and one naming them all (a policy change) reach the
// SMF as one naming them all, not as the first alone.
func TestWaitingReauthorizationsMerge(t *testing.T) {
	g := func(rgs ...uint32) []byte {
		var sess store.ChargingSession
		for _, rg := range rgs {
			sess.Grants = append(sess.Grants, store.ChargingGrant{RatingGroup: rg})
		}
		return reauthBody(sess)
	}
	n := &notifier{dests: map[string]*destination{"http://smf": {running: true}}, queued: map[string]bool{}, o: options{notifyQueue: 8}}
	n.enqueue(notifyJob{ref: "s", uri: "http://smf/n", body: g(10)})
	n.enqueue(notifyJob{ref: "s", uri: "http://smf/n", body: g(10, 20)})
	n.enqueue(notifyJob{ref: "s", uri: "http://smf/n", body: g(30)})
	jobs := n.dests["http://smf"].jobs
	if len(jobs) != 1 {
		t.Fatalf("%d jobs queued, want 1", len(jobs))
	}
	var got ChargingNotifyRequest
	if err := json.Unmarshal(jobs[0].body, &got); err != nil {
		t.Fatal(err)
	}
	var rgs []uint32
	for _, d := range got.ReauthorizationDetails {
		rgs = append(rgs, *d.RatingGroup)
	}
	if !cmp.Equal(rgs, []uint32{10, 20, 30}) {
		t.Errorf("the waiting notification names %v, want 10, 20 and 30", rgs)
	}
	// One naming none (the whole session) stays whole.
	n.enqueue(notifyJob{ref: "t", uri: "http://smf/n", body: g()})
	n.enqueue(notifyJob{ref: "t", uri: "http://smf/n", body: g(10)})
	if b := n.dests["http://smf"].jobs[1].body; string(b) != string(g()) {
		t.Errorf("a whole-session notification became %s", b)
	}
}
