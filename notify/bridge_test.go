package notify

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
)

// process is one API process's hub and bridge on a shared Redis.
type process struct {
	hub    *Hub
	bridge *RedisBridge
}

func newProcess(t *testing.T, rdb redis.UniversalClient) process {
	t.Helper()
	hub, err := NewHub()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hub.Close(context.Background()) })
	b, err := NewRedisBridge(context.Background(), rdb, hub, WithBridgeChannel("test:live"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return process{hub: hub, bridge: b}
}

// bridgeSuite: a live notification published on one process reaches the
// subscribers of its family on every process, once, filtered as the hub
// filters; another family's subscribers get nothing.
func bridgeSuite(t *testing.T, a, b process) {
	t.Helper()
	childA, _ := a.hub.Subscribe(100, Filter{MemberID: 3, Role: RoleMember})
	ownerB, _ := b.hub.Subscribe(100, Filter{MemberID: 1, Role: RoleOwner})
	childB, _ := b.hub.Subscribe(100, Filter{MemberID: 3, Role: RoleMember})
	otherB, _ := b.hub.Subscribe(200, Filter{Role: RoleAdmin})

	n, err := FamilyChanged(100, FamilyChange{Change: "POLICY", Members: []int64{3}, By: 1}, time.Unix(1700000000, 0), Korean)
	if err != nil {
		t.Fatal(err)
	}
	local, err := a.bridge.Publish(context.Background(), n)
	if err != nil || local != 1 {
		t.Fatalf("Publish = %d, %v; want 1 local subscriber", local, err)
	}
	only := note(0, 100, 4) // about member 4: the child does not see it
	if _, err := a.bridge.Publish(context.Background(), only); err != nil {
		t.Fatal(err)
	}
	recv := func(s *Subscription, what string) Notification {
		t.Helper()
		select {
		case m, ok := <-s.C:
			if !ok {
				t.Fatalf("%s: subscription closed: %v", what, s.Err())
			}
			return m.Data
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: nothing within 10 s", what)
		}
		return Notification{}
	}
	for what, s := range map[string]*Subscription{"the child on the same process": childA, "the owner on the other process": ownerB,
		"the child on the other process": childB} {
		got := recv(s, what)
		var fc FamilyChange
		if err := json.Unmarshal(got.Payload, &fc); err != nil {
			t.Fatal(err)
		}
		if got.Kind != KindFamilyChanged || got.ID != 0 || got.Title == "" || !cmp.Equal(fc, FamilyChange{Change: "POLICY", Members: []int64{3}, By: 1}) {
			t.Errorf("%s: got %+v (payload %+v)", what, got, fc)
		}
	}
	if got := recv(ownerB, "the owner, second message"); got.MemberID != 4 {
		t.Errorf("second message %+v, want member 4's", got)
	}
	// Nothing more: the child sees only its own and family-wide ones, the
	// publishing process's subscribers get each once, the other family
	// none. A last message to each family comes next, in order.
	last100, last200 := note(0, 100, 0), note(0, 200, 0)
	last100.EventID, last200.EventID = "last-100", "last-200"
	for _, n := range []Notification{last100, last200} {
		if _, err := a.bridge.Publish(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
	for what, s := range map[string]*Subscription{"child A": childA, "child B": childB, "owner B": ownerB, "other family": otherB} {
		if got := recv(s, what+", last"); got.EventID != "last-100" && got.EventID != "last-200" {
			t.Errorf("%s got %+v before the last message", what, got)
		}
	}
}

func TestRedisBridge(t *testing.T) {
	mr := miniredis.RunT(t)
	open := func() redis.UniversalClient {
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	a, b := newProcess(t, open()), newProcess(t, open())
	bridgeSuite(t, a, b)

	// Close is idempotent; Publish still reaches the own hub after it.
	if err := a.bridge.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.bridge.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRedisBridge(context.Background(), nil, a.hub); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil client: %v", err)
	}
	if _, err := NewRedisBridge(context.Background(), open(), nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil hub: %v", err)
	}
	if _, err := a.bridge.Publish(context.Background(), Notification{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("no family: %v", err)
	}
}

// TestFamilyChangedTexts: every change kind has its own words, in Korean
// and English.
func TestFamilyChangedTexts(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range []string{"POLICY", "PLAN", "THRESHOLDS", "TOPUP", "GIFT", "MEMBER", "REMOVED", "ROLE", "PASSWORD", "REQUEST"} {
		for _, lang := range []Lang{Korean, English} {
			n, err := FamilyChanged(1, FamilyChange{Change: k}, time.Now(), lang)
			if err != nil {
				t.Fatal(err)
			}
			if n.Title == "" || n.Body == "" || seen[n.Body] {
				t.Errorf("%s %s: %q %q (empty or not its own)", k, lang, n.Title, n.Body)
			}
			seen[n.Body] = true
		}
	}
	if _, err := FamilyChanged(0, FamilyChange{Change: "POLICY"}, time.Now(), Korean); !errors.Is(err, ErrInvalid) {
		t.Errorf("family 0: %v", err)
	}
}
