package charging

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/policy"
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
	n := &notifier{dests: map[string]*destination{"http://smf": {running: true}}, queued: map[string]string{}, o: options{notifyQueue: 8}}
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

// heldTransport answers each request once release lets it, signalling in
// as each arrives.
type heldTransport struct {
	in      chan string
	release chan struct{}
}

func (h heldTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	h.in <- r.URL.Path
	select {
	case <-h.release:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: r}, nil
}

// heldNotifier is a notifier with queues of queue whose deliveries ht
// holds; it is closed when the test ends.
func heldNotifier(t *testing.T, queue int) (*notifier, heldTransport) {
	ht := heldTransport{in: make(chan string, 16), release: make(chan struct{})}
	o := defaults()
	o.notifyQueue, o.notifyTimeout = queue, 10*time.Second
	o.notifyClient = &http.Client{Transport: ht}
	n := newNotifier(o)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = n.close(ctx)
	})
	return n, ht
}

// A catalog scan's notifications (low) fill at most half an SMF's queue,
// wait behind the families' changes and take none of their places: a
// change queued after them is delivered before them, also when it merges
// into a scan's notification of the same session, and the changes have
// the whole queue besides the scan's.
func TestScanNotificationsGiveWay(t *testing.T) {
	n, ht := heldNotifier(t, 4)
	defer close(ht.release)
	job := func(ref string, low bool) notifyJob {
		return notifyJob{ref: ref, uri: "http://smf.example/n/" + ref, body: reauthBody(store.ChargingSession{}), low: low}
	}
	if !n.enqueueWithin(context.Background(), job("s1", true), 0) {
		t.Fatal("the first scan notification was not queued")
	}
	if got := <-ht.in; got != "/n/s1" { // being delivered: out of the queue
		t.Fatalf("delivering %s", got)
	}
	for _, ref := range []string{"s2", "s3"} {
		if !n.enqueueWithin(context.Background(), job(ref, true), 0) {
			t.Fatalf("scan notification %s not queued with room for it", ref)
		}
	}
	if n.enqueueWithin(context.Background(), job("s4", true), 0) {
		t.Error("a scan notification took more than half the queue")
	}
	n.enqueue(job("family", false))
	n.enqueue(job("s3", false)) // a family change of a session the scan queued
	n.enqueue(job("family2", false))
	n.enqueue(job("family3", false)) // the queue's 4 places for changes: a scan takes none
	if n.enqueueWithin(context.Background(), job("family4", false), 0) {
		t.Error("a fifth change was queued in a queue of 4")
	}
	n.mu.Lock()
	var order []string
	for _, d := range n.dests {
		for _, j := range d.jobs {
			order = append(order, j.ref)
		}
	}
	n.mu.Unlock()
	if want := []string{"family", "s3", "family2", "family3", "s2"}; !slices.Equal(order, want) {
		t.Errorf("queue %v, want %v", order, want)
	}
	for _, want := range []string{"/n/family", "/n/s3", "/n/family2", "/n/family3", "/n/s2"} {
		ht.release <- struct{}{}
		select {
		case got := <-ht.in:
			if got != want {
				t.Errorf("delivered %s, want %s", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s not delivered", want)
		}
	}
}

// A rating group moved by edits in a row is asked again at the first
// edit's time (later edits do not put it off) and once more at the last
// edit's.
func TestCatalogAskedAgainForTheLastEdit(t *testing.T) {
	s := &Service{o: defaults(), catalog: catalogChanges{now: map[uint32]bool{}, later: map[uint32]askLater{}, wake: make(chan struct{}, 1)}}
	s.o.groups = RatingGroups{11: {AppID: "com.youtube.app"}}
	video, game, social := policy.Catalog{"com.youtube.app": policy.CategoryVideo}, policy.Catalog{"com.youtube.app": policy.CategoryGame},
		policy.Catalog{"com.youtube.app": policy.CategorySocial}
	start := time.Now()
	s.CatalogChanged(video, game, time.Hour)
	s.CatalogChanged(game, social, 2*time.Hour)
	due, next := s.catalog.take(start)
	if !due[11] || next.Before(start.Add(time.Hour)) || next.After(time.Now().Add(time.Hour)) {
		t.Fatalf("at once: %v, next %v", due, next.Sub(start))
	}
	if due, next = s.catalog.take(next); !due[11] || next.Before(start.Add(2*time.Hour)) || next.After(time.Now().Add(2*time.Hour)) {
		t.Fatalf("at the first edit's time: %v, next %v", due, next.Sub(start))
	}
	if due, next = s.catalog.take(next); !due[11] || !next.IsZero() {
		t.Fatalf("at the last edit's time: %v, next %v", due, next)
	}
	if due, _ = s.catalog.take(start.Add(3 * time.Hour)); len(due) != 0 {
		t.Errorf("after: %v", due)
	}
}

// A session's notification waiting in its SMF's queue goes where the
// session's next one goes: to the new endpoint when the SMF moved (an
// update named another notifyUri), on another host or on the same one.
func TestWaitingNotificationFollowsTheSMF(t *testing.T) {
	n, ht := heldNotifier(t, 8)
	job := func(ref, uri string, rg uint32) notifyJob {
		return notifyJob{ref: ref, uri: uri, body: reauthBody(store.ChargingSession{Grants: []store.ChargingGrant{{RatingGroup: rg}}})}
	}
	n.enqueue(job("busy", "http://old.example/old/busy", 10))
	if got := <-ht.in; got != "/old/busy" { // being delivered: the others wait behind it
		t.Fatalf("delivering %s", got)
	}
	n.enqueue(job("s", "http://old.example/old/s", 10))
	n.enqueue(job("t", "http://old.example/a/t", 10))
	n.enqueue(job("s", "http://new.example/new/s", 20)) // the SMF moved to another host
	n.enqueue(job("t", "http://old.example/b/t", 20))   // and to another path
	got := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for len(got) < 2 { // answer what is held until two more were sent
		select {
		case p := <-ht.in:
			got[p] = true
		case ht.release <- struct{}{}:
		case <-deadline:
			t.Fatalf("delivered only %v", got)
		}
	}
	close(ht.release)
	if !got["/new/s"] || !got["/b/t"] || got["/old/s"] || got["/a/t"] {
		t.Errorf("delivered %v, want /new/s and /b/t, not the endpoints the SMF left", got)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for key, d := range n.dests {
		if len(d.jobs) > 0 {
			t.Errorf("%s still holds %d notifications", key, len(d.jobs))
		}
	}
}
