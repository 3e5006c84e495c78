package store_test

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/service/store"
)

func pushSub(t *testing.T, endpoint string) notify.PushSubscription {
	t.Helper()
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return notify.PushSubscription{Endpoint: endpoint, P256dh: base64.RawURLEncoding.EncodeToString(k.PublicKey().Bytes()),
		Auth: base64.RawURLEncoding.EncodeToString(make([]byte, 16))}
}

func testPushSubscriptions(t *testing.T, e *env) {
	e.Family(t, 1) // owner 11, child 12
	e.Family(t, 2) // owner 21, child 22
	if _, err := e.S.AddMember(e.Ctx, store.NewMember{ID: 13, FamilyID: 1, Name: "m13", Role: "MEMBER"}, store.System); err != nil {
		t.Fatal(err)
	}
	rules := store.PushRules{Max: 10}
	save := func(fid, cid int64, s notify.PushSubscription) notify.PushSubscription {
		t.Helper()
		got, err := e.S.SavePushSubscription(e.Ctx, fid, cid, s, rules)
		if err != nil {
			t.Fatalf("save %d %s: %v", cid, s.Endpoint, err)
		}
		return got
	}
	o := save(1, 11, pushSub(t, "https://push.example/o"))
	c := save(1, 12, pushSub(t, "https://push.example/c"))
	m := save(1, 13, pushSub(t, "https://push.example/m"))
	other := save(2, 21, pushSub(t, "https://push.example/other"))
	// The same browser again: keys replaced, still one row.
	c = save(1, 12, pushSub(t, "https://push.example/c"))

	// Recipients say their role: a member's texts are written for members.
	role := func(s notify.PushSubscription, r notify.Role) notify.PushSubscription { s.Role = string(r); return s }
	o, c, m, other = role(o, notify.RoleOwner), role(c, notify.RoleMember), role(m, notify.RoleMember), role(other, notify.RoleOwner)
	for _, tc := range []struct {
		name        string
		fid, member int64
		want        []notify.PushSubscription
	}{
		{name: "about the child: owners and the child", fid: 1, member: 12, want: []notify.PushSubscription{o, c}},
		{name: "family-wide: everyone", fid: 1, member: 0, want: []notify.PushSubscription{o, m, c}},
		{name: "about the owner", fid: 1, member: 11, want: []notify.PushSubscription{o}},
		{name: "another family", fid: 2, member: 22, want: []notify.PushSubscription{other}},
	} {
		got, err := e.S.PushRecipients(e.Ctx, tc.fid, tc.member)
		if err != nil {
			t.Fatal(err)
		}
		sortSubs := cmp.Transformer("sort", func(in []notify.PushSubscription) map[string]notify.PushSubscription {
			out := map[string]notify.PushSubscription{}
			for _, s := range in {
				out[s.Endpoint] = s
			}
			return out
		})
		if diff := cmp.Diff(tc.want, got, sortSubs); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}

	// Invalid subscriptions, an unknown or foreign member.
	loopback := store.PushRules{Max: 10, AllowLoopback: true}
	bad := pushSub(t, "http://push.example/x")
	_, err := e.S.SavePushSubscription(e.Ctx, 1, 11, bad, loopback)
	wantErr(t, "http endpoint", err, store.ErrInvalid)
	var fe *store.FieldError
	short := pushSub(t, "https://push.example/x")
	short.Auth = "AAAA"
	if _, err := e.S.SavePushSubscription(e.Ctx, 1, 11, short, rules); !errors.As(err, &fe) || fe.Field != "keys.auth" {
		t.Errorf("short auth: %v", err)
	}
	if _, err := e.S.SavePushSubscription(e.Ctx, 1, 11, pushSub(t, "https://100.64.0.1/x"), rules); !errors.As(err, &fe) || fe.Field != "endpoint" {
		t.Errorf("carrier-grade NAT endpoint: %v", err)
	}
	_, err = e.S.SavePushSubscription(e.Ctx, 1, 21, pushSub(t, "https://push.example/y"), rules)
	wantErr(t, "member of another family", err, store.ErrNotFound)
	_, err = e.S.SavePushSubscription(e.Ctx, 1, 11, pushSub(t, "https://push.example/y"), store.PushRules{})
	wantErr(t, "no cap", err, store.ErrInvalid)
	if _, err := e.S.SavePushSubscription(e.Ctx, 1, 11, pushSub(t, "http://127.0.0.1:9/p"), loopback); err != nil {
		t.Errorf("loopback http in tests: %v", err)
	}

	// Another member posting an endpoint does not take it: refused on the
	// endpoint, in the family or from another, and the owner's keys stay.
	for _, thief := range [][2]int64{{1, 13}, {1, 11}, {2, 21}} {
		_, err := e.S.SavePushSubscription(e.Ctx, thief[0], thief[1], pushSub(t, "https://push.example/c"), rules)
		if !errors.As(err, &fe) || fe.Field != "endpoint" || !errors.Is(err, store.ErrConflict) {
			t.Errorf("member %d posting the child's endpoint: %v", thief[1], err)
		}
	}
	if got, _ := e.S.PushSubscriptions(e.Ctx, 12); len(got) != 1 || got[0] != role(c, "") {
		t.Errorf("the child's subscription after the attempts: %+v, want %+v", got, c)
	}

	// Delete: only the caller's own.
	wantErr(t, "delete another's", e.S.DeletePushSubscription(e.Ctx, 11, "https://push.example/c"), store.ErrNotFound)
	if err := e.S.DeletePushSubscription(e.Ctx, 12, "https://push.example/c"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "delete twice", e.S.DeletePushSubscription(e.Ctx, 12, "https://push.example/c"), store.ErrNotFound)

	// Gone (the push service's 410): removed whoever's; again is fine.
	for range 2 {
		if err := e.S.RemovePushSubscription(e.Ctx, "https://push.example/other"); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := e.S.PushRecipients(e.Ctx, 2, 0); len(got) != 0 {
		t.Errorf("after 410: %+v", got)
	}

	// Removing a member removes their subscriptions.
	if err := e.S.RemoveMember(e.Ctx, 1, 13, owner); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.S.PushSubscriptions(e.Ctx, 13); len(got) != 0 {
		t.Errorf("removed member's subscriptions: %+v", got)
	}
	if n := e.Count(t, "push_subscriptions"); n != 2 { // 11's: o and the loopback one
		t.Errorf("rows left = %d, want 2", n)
	}
}

// A member has at most rules.Max subscriptions: a new endpoint beyond it is
// refused on "endpoint", even when many arrive at once (the member's row
// lock counts them one at a time); storing an endpoint it has again is not
// a new one; another member's room is its own.
func testPushSubscriptionCap(t *testing.T, e *env) {
	e.Family(t, 1) // owner 11, child 12
	rules := store.PushRules{Max: 3}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = e.S.SavePushSubscription(e.Ctx, 1, 12, pushSub(t, fmt.Sprintf("https://push.example/%d", i)), rules)
		})
	}
	wg.Wait()
	stored, refused := 0, 0
	for _, err := range errs {
		var fe *store.FieldError
		switch {
		case err == nil:
			stored++
		case errors.As(err, &fe) && fe.Field == "endpoint" && errors.Is(err, store.ErrConflict):
			refused++
		default:
			t.Errorf("save: %v", err)
		}
	}
	got, err := e.S.PushSubscriptions(e.Ctx, 12)
	if err != nil || stored != 3 || refused != 5 || len(got) != 3 {
		t.Errorf("stored %d, refused %d, rows %d (%v); want 3, 5, 3", stored, refused, len(got), err)
	}
	if _, err := e.S.SavePushSubscription(e.Ctx, 1, 12, pushSub(t, got[0].Endpoint), rules); err != nil {
		t.Errorf("new keys for an endpoint at the cap: %v", err)
	}
	if _, err := e.S.SavePushSubscription(e.Ctx, 1, 11, pushSub(t, "https://push.example/owner"), rules); err != nil {
		t.Errorf("another member: %v", err)
	}
}

func testVAPIDKeys(t *testing.T, e *env) {
	first, err := e.S.VAPIDKeys(e.Ctx, func() (store.VAPIDKeys, error) {
		k, err := notify.GenerateVAPIDKeys()
		return store.VAPIDKeys(k), err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := notify.VAPIDKeys(first).Validate(); err != nil {
		t.Fatalf("stored keys: %v", err)
	}
	again, err := e.S.VAPIDKeys(e.Ctx, func() (store.VAPIDKeys, error) { return store.VAPIDKeys{}, errors.New("must not generate") })
	if err != nil || again != first {
		t.Errorf("second call = %+v, %v; want the stored pair", again, err)
	}
}
