package charging_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/backoff"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/charging"
)

// reauthorized is the rating groups a REAUTHORIZATION names.
func reauthorized(t *testing.T, n notice) []uint32 {
	t.Helper()
	var req charging.ChargingNotifyRequest
	if err := json.Unmarshal(n.body, &req); err != nil || req.NotificationType != charging.NotificationReauthorization {
		t.Fatalf("notification %s: %s (%v)", n.path, n.body, err)
	}
	var rgs []uint32
	for _, d := range req.ReauthorizationDetails {
		rgs = append(rgs, *d.RatingGroup)
	}
	return rgs
}

// An edit of the app catalog that moves an app to another category asks
// the live grants of that app's rating group to report again, at once and
// once more when every process has read the edit; a category's rating
// group, another app's and a session without one are not asked; an edit
// that moves no mapped app asks nothing.
func TestCatalogChangeReauthorizesAppGrants(t *testing.T) {
	groups, err := charging.ParseRatingGroups("10=VIDEO,11=app:com.youtube.app,12=app:com.kakao.talk")
	if err != nil {
		t.Fatal(err)
	}
	const spread = 300 * time.Millisecond
	e := newEnv(t, charging.WithRatingGroups(groups), charging.WithNotifyNetworks(true))
	node := newSMF(t, false)
	open := func(sub string, rgs ...uint32) {
		t.Helper()
		var usage []charging.MultipleUnitUsage
		for _, rg := range rgs {
			usage = append(usage, ask(rg, mib, -1))
		}
		req := request(sub, 0, usage...)
		req.NotifyURI = node.URL + "/n/" + sub
		if _, _, err := e.svc.Create(e.ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	open("imsi-"+childIMSI, 10, 11)
	open("msisdn-821012345678", 10, 12)
	before := policy.Catalog{"com.youtube.app": policy.CategoryVideo, "com.kakao.talk": policy.CategoryMessaging, "com.nexon.game": policy.CategoryGame}

	moved := policy.Catalog{"com.youtube.app": policy.CategoryVideo, "com.kakao.talk": policy.CategoryMessaging, "com.nexon.game": policy.CategoryVideo}
	e.svc.CatalogChanged(before, moved, spread) // an app no rating group names
	start := time.Now()
	after := policy.Catalog{"com.youtube.app": policy.CategoryGame, "com.kakao.talk": policy.CategoryMessaging}
	e.svc.CatalogChanged(before, after, spread)
	first := node.wait(t, 10*time.Second)
	if got := reauthorized(t, first); first.path != "/n/imsi-"+childIMSI || len(got) != 1 || got[0] != 11 {
		t.Errorf("notified %s for %v, want the child's session for rating group 11", first.path, got)
	}
	again := node.wait(t, 10*time.Second)
	if got := reauthorized(t, again); again.path != "/n/imsi-"+childIMSI || len(got) != 1 || got[0] != 11 {
		t.Errorf("asked again: %s for %v", again.path, got)
	}
	if d := again.at.Sub(start); d < spread {
		t.Errorf("asked again %v after the edit, want ≥ %v (every process read it)", d, spread)
	}
	select {
	case n := <-node.got:
		t.Errorf("an extra notification: %s %s", n.path, n.body)
	case <-time.After(spread + 100*time.Millisecond):
	}
}

// A catalog change reaches every live session holding the app's grant,
// however many: the scan reads them a page at a time.
func TestCatalogChangeReachesEveryLiveSession(t *testing.T) {
	groups, err := charging.ParseRatingGroups("11=app:com.youtube.app")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, charging.WithRatingGroups(groups), charging.WithNotifyNetworks(true),
		charging.WithNotifyDelivery(3*time.Second, 5, charging.DefaultNotifyBackoff, 8))
	e.fake.SetPool(family, 1<<40) // no grant crowds another out (and is asked to report)
	node := newSMF(t, false)
	const sessions = 1203 // more than two pages
	for i := range sessions {
		req := request("imsi-"+childIMSI, 0, ask(11, 1024, -1))
		req.NotifyURI = fmt.Sprintf("%s/n/%d", node.URL, i)
		if _, _, err := e.svc.Create(e.ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	e.svc.CatalogChanged(policy.Catalog{"com.youtube.app": policy.CategoryVideo}, policy.Catalog{}, 0)
	seen := map[string]bool{}
	for len(seen) < sessions {
		n := node.wait(t, 10*time.Second)
		if seen[n.path] {
			t.Fatalf("%s notified twice", n.path)
		}
		seen[n.path] = true
	}
	select {
	case n := <-node.got:
		t.Errorf("an extra notification: %s %s", n.path, n.body)
	case <-time.After(50 * time.Millisecond):
	}
}

// A catalog change's scan goes at the pace each SMF takes notifications
// (2 places of a queue of 4 hold many more sessions' notifications, each
// delivered),
// and an SMF that takes none holds up no other's: its queue fills, the
// rest of its notifications are dropped, and the scan goes on.
func TestCatalogChangeKeepsPaceWithEachSMF(t *testing.T) {
	groups, err := charging.ParseRatingGroups("11=app:com.youtube.app")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	dropped := 0
	e := newEnv(t, charging.WithRatingGroups(groups), charging.WithNotifyNetworks(true),
		charging.WithNotifyDelivery(300*time.Millisecond, 1, backoff.Policy{Min: time.Millisecond, Max: time.Millisecond}, 4),
		charging.WithHooks(charging.Hooks{OnNotify: func(n charging.NotifyInfo) {
			if n.Dropped {
				mu.Lock()
				dropped++
				mu.Unlock()
			}
		}}))
	e.fake.SetPool(family, 1<<40)
	stuck, fine := newSMF(t, true), newSMF(t, false)
	const each = 40
	for i := range 2 * each {
		req := request("imsi-"+childIMSI, 0, ask(11, 1024, -1))
		req.NotifyURI = fmt.Sprintf("%s/n/%d", fine.URL, i)
		if i%2 == 1 {
			req.NotifyURI = fmt.Sprintf("%s/n/%d", stuck.URL, i)
		}
		if _, _, err := e.svc.Create(e.ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	e.svc.CatalogChanged(policy.Catalog{"com.youtube.app": policy.CategoryVideo}, policy.Catalog{"com.youtube.app": policy.CategoryGame}, 0)
	seen := map[string]bool{}
	for len(seen) < each {
		seen[fine.wait(t, 10*time.Second).path] = true
	}
	// Waiting a delivery's timeout for each of the stuck SMF's 40 would
	// take 12 s: it is waited for once.
	if took, bound := time.Since(start), testenv.LatencyBound(t, 2500*time.Millisecond); took > bound {
		t.Errorf("the fine SMF's notifications took %v (bound %v): the scan waited for the stuck SMF again and again", took, bound)
	}
	stuck.wait(t, 10*time.Second) // the one it holds
	mu.Lock()
	defer mu.Unlock()
	// The stuck SMF holds one and queues 2: most of its others are
	// dropped, some only once the attempts that time out make room and
	// the queue fills again.
	if dropped == 0 || dropped > each-1 {
		t.Errorf("%d of the stuck SMF's notifications dropped, want 1..%d", dropped, each-1)
	}
}

// A scan under way does not hold Close: an SMF that takes nothing makes
// the scan wait for room, and Close ends that wait at once.
func TestCloseEndsACatalogScan(t *testing.T) {
	groups, err := charging.ParseRatingGroups("11=app:com.youtube.app")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, charging.WithRatingGroups(groups), charging.WithNotifyNetworks(true),
		charging.WithNotifyDelivery(30*time.Second, 1, backoff.Policy{Min: time.Millisecond, Max: time.Millisecond}, 2))
	e.fake.SetPool(family, 1<<40)
	stuck := newSMF(t, true)
	for i := range 30 {
		req := request("imsi-"+childIMSI, 0, ask(11, 1024, -1))
		req.NotifyURI = fmt.Sprintf("%s/n/%d", stuck.URL, i)
		if _, _, err := e.svc.Create(e.ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	e.svc.CatalogChanged(policy.Catalog{"com.youtube.app": policy.CategoryVideo}, policy.Catalog{}, time.Hour)
	stuck.wait(t, 10*time.Second) // held: the scan now waits for room
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = e.svc.Close(ctx) // the held delivery is cut off at ctx's end
	if took, bound := time.Since(start), testenv.LatencyBound(t, time.Second); took > bound {
		t.Errorf("Close took %v (bound %v) with a scan waiting on an SMF that takes nothing", took, bound)
	}
}
