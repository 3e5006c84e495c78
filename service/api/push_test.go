package api

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/notify"
)

// testPushSubscription is a browser's subscription at endpoint with fresh keys.
func testPushSubscription(t *testing.T, endpoint string) notify.PushSubscription {
	t.Helper()
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	auth := make([]byte, 16)
	rand.Read(auth)
	return notify.PushSubscription{Endpoint: endpoint, P256dh: base64.RawURLEncoding.EncodeToString(k.PublicKey().Bytes()),
		Auth: base64.RawURLEncoding.EncodeToString(auth)}
}

// testPushKeys is the keys object of a subscription, as JSON.
func testPushKeys(t *testing.T) string {
	t.Helper()
	s := testPushSubscription(t, "https://push.example/")
	b, err := json.Marshal(map[string]string{"p256dh": s.P256dh, "auth": s.Auth})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func pushBody(endpoint string, keys map[string]string) map[string]any {
	return map[string]any{"endpoint": endpoint, "keys": keys}
}

// The subscription routes as the family app's service worker calls them:
// the key, subscribe with PushSubscription.toJSON() (expirationTime null),
// again (same endpoint: replaced), unsubscribe, unsubscribe again (404);
// removing the member drops its subscriptions.
func TestPushSubscriptionRoutes(t *testing.T) {
	keys, err := notify.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	f := newAPIFixture(t, func(c *Config) { c.VAPIDPublicKey = keys.Public })
	var key VAPIDPublicKey
	f.call(http.MethodGet, "/push/vapid-public-key", "", nil, http.StatusOK, &key)
	if key.PublicKey != keys.Public {
		t.Errorf("key = %q, want %q", key.PublicKey, keys.Public)
	}

	child, owner := f.token(childA), f.token(ownerA)
	sub := testPushSubscription(t, "https://fcm.googleapis.com/fcm/send/abc:123")
	body := map[string]any{"endpoint": sub.Endpoint, "expirationTime": nil, "keys": map[string]string{"p256dh": sub.P256dh, "auth": sub.Auth}}
	var got PushSubscriptionView
	f.call(http.MethodPost, "/families/100/push-subscriptions", child, body, http.StatusCreated, &got)
	if diff := cmp.Diff(PushSubscriptionView{MemberID: childA, Endpoint: sub.Endpoint}, got); diff != "" {
		t.Errorf("subscribe (-want +got):\n%s", diff)
	}
	f.call(http.MethodPost, "/families/100/push-subscriptions", child, body, http.StatusCreated, &got)
	stored, err := f.store.PushSubscriptions(t.Context(), childA)
	if err != nil || len(stored) != 1 || stored[0].P256dh != sub.P256dh || stored[0].Auth != sub.Auth {
		t.Errorf("stored = %+v, %v", stored, err)
	}
	// The child's subscription receives what concerns the child and the family.
	for member, want := range map[int64]int{childA: 1, 0: 1, ownerA: 0} {
		r, err := f.store.PushRecipients(t.Context(), famA, member)
		if err != nil || len(r) != want {
			t.Errorf("recipients about %d = %+v, %v; want %d", member, r, err, want)
		}
	}
	del := "/families/100/push-subscriptions?endpoint=" + url.QueryEscape(sub.Endpoint)
	f.problem(http.MethodDelete, del, owner, nil, http.StatusNotFound, "")
	f.call(http.MethodDelete, del, child, nil, http.StatusNoContent, nil)
	f.problem(http.MethodDelete, del, child, nil, http.StatusNotFound, "")

	// A removed member's subscriptions go with it.
	f.call(http.MethodPost, "/families/100/push-subscriptions", child, body, http.StatusCreated, &got)
	f.call(http.MethodDelete, "/families/100/members/1002", owner, nil, http.StatusNoContent, nil)
	if stored, err := f.store.PushSubscriptions(t.Context(), childA); err != nil || len(stored) != 0 {
		t.Errorf("removed member's subscriptions: %+v, %v", stored, err)
	}
}

// An endpoint whose host is an address literal the dial guard refuses is
// refused when it is subscribed (422 at body.endpoint), not only when a push
// is dialled: carrier-grade NAT (a cloud's metadata address among them),
// benchmarking, NAT64, 6to4, private and loopback addresses, localhost, a
// port other than 443.
func TestPushSubscriptionRefusesInternalAddresses(t *testing.T) {
	f := newAPIFixture(t)
	child := f.token(childA)
	keys := map[string]string{}
	if err := json.Unmarshal([]byte(testPushKeys(t)), &keys); err != nil {
		t.Fatal(err)
	}
	for _, endpoint := range []string{"https://100.64.0.1/x", "https://100.100.100.200/latest/meta-data", "https://198.18.0.1/x",
		"https://[64:ff9b::a9fe:a9fe]/x", "https://[2002:a9fe:a9fe::1]/x", "https://10.0.0.1/x", "https://127.0.0.1/x",
		"https://localhost/x", "https://push.example:8080/x"} {
		f.problem(http.MethodPost, "/families/100/push-subscriptions", child, pushBody(endpoint, keys), http.StatusUnprocessableEntity, "body.endpoint")
	}
	if stored, err := f.store.PushSubscriptions(t.Context(), childA); err != nil || len(stored) != 0 {
		t.Errorf("stored = %+v, %v", stored, err)
	}
}

// An endpoint belongs to the member who subscribed it: another member
// posting it — in the family or not, with its own keys or the same — gets
// 409 at body.endpoint and moves nothing; the subscription still gets its
// member's pushes, and its member can still delete it.
func TestPushSubscriptionNotStolen(t *testing.T) {
	f := newAPIFixture(t)
	child := f.token(childA)
	sub := testPushSubscription(t, "https://fcm.googleapis.com/fcm/send/child-browser")
	keys := map[string]string{"p256dh": sub.P256dh, "auth": sub.Auth}
	f.call(http.MethodPost, "/families/100/push-subscriptions", child, pushBody(sub.Endpoint, keys), http.StatusCreated, nil)
	thief := testPushSubscription(t, sub.Endpoint)
	for _, tc := range []struct {
		name  string
		fam   int64
		token string
		keys  map[string]string
	}{
		{"the owner, own keys", famA, f.token(ownerA), map[string]string{"p256dh": thief.P256dh, "auth": thief.Auth}},
		{"a member of the family, the same keys", famA, f.token(victimA), keys},
		{"another family", famB, f.token(ownerB), map[string]string{"p256dh": thief.P256dh, "auth": thief.Auth}},
	} {
		p := f.problem(http.MethodPost, fmt.Sprintf("/families/%d/push-subscriptions", tc.fam), tc.token,
			pushBody(sub.Endpoint, tc.keys), http.StatusConflict, "body.endpoint")
		if !strings.Contains(p.Detail, "another member") {
			t.Errorf("%s: detail %q", tc.name, p.Detail)
		}
	}
	stored, err := f.store.PushSubscriptions(t.Context(), childA)
	if err != nil || len(stored) != 1 || stored[0].P256dh != sub.P256dh || stored[0].Auth != sub.Auth {
		t.Errorf("the child's subscription = %+v, %v", stored, err)
	}
	if r, err := f.store.PushRecipients(t.Context(), famA, childA); err != nil || len(r) != 1 || r[0].MemberID != childA {
		t.Errorf("recipients about the child = %+v, %v", r, err)
	}
	f.call(http.MethodDelete, "/families/100/push-subscriptions?endpoint="+url.QueryEscape(sub.Endpoint), child, nil, http.StatusNoContent, nil)
}

// A member may have DefaultMaxPushSubscriptions (10) subscriptions: the
// 11th endpoint is refused with 409 at body.endpoint saying what to do,
// while subscribing an existing endpoint again (new keys) still works, and
// removing one makes room.
func TestPushSubscriptionCap(t *testing.T) {
	f := newAPIFixture(t)
	child := f.token(childA)
	keys := map[string]string{}
	if err := json.Unmarshal([]byte(testPushKeys(t)), &keys); err != nil {
		t.Fatal(err)
	}
	endpoint := func(i int) string { return fmt.Sprintf("https://fcm.googleapis.com/fcm/send/browser-%d", i) }
	for i := range 10 {
		f.call(http.MethodPost, "/families/100/push-subscriptions", child, pushBody(endpoint(i), keys), http.StatusCreated, nil)
	}
	p := f.problem(http.MethodPost, "/families/100/push-subscriptions", child, pushBody(endpoint(10), keys), http.StatusConflict, "body.endpoint")
	if !strings.Contains(p.Detail, "10 push subscriptions") {
		t.Errorf("detail %q", p.Detail)
	}
	f.call(http.MethodPost, "/families/100/push-subscriptions", child, pushBody(endpoint(3), map[string]string{"p256dh": keys["p256dh"], "auth": keys["auth"]}), http.StatusCreated, nil)
	f.call(http.MethodDelete, "/families/100/push-subscriptions?endpoint="+url.QueryEscape(endpoint(0)), child, nil, http.StatusNoContent, nil)
	f.call(http.MethodPost, "/families/100/push-subscriptions", child, pushBody(endpoint(10), keys), http.StatusCreated, nil)
	if stored, err := f.store.PushSubscriptions(t.Context(), childA); err != nil || len(stored) != 10 {
		t.Errorf("stored %d, %v; want 10", len(stored), err)
	}
	// Another member's room is its own.
	f.call(http.MethodPost, "/families/100/push-subscriptions", f.token(ownerA), pushBody(endpoint(11), keys), http.StatusCreated, nil)
	// The caller lists its own, oldest first: what DELETE takes.
	var list []PushSubscriptionView
	f.call(http.MethodGet, "/families/100/push-subscriptions", child, nil, http.StatusOK, &list)
	want := []PushSubscriptionView{}
	for i := 1; i <= 10; i++ {
		want = append(want, PushSubscriptionView{MemberID: childA, Endpoint: endpoint(i)})
	}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}

	// The cap is configurable (DPCS_PUSH_MAX_SUBSCRIPTIONS).
	two := newAPIFixture(t, func(c *Config) { c.MaxPushSubscriptions = 2 })
	child = two.token(childA)
	for i := range 2 {
		two.call(http.MethodPost, "/families/100/push-subscriptions", child, pushBody(endpoint(i), keys), http.StatusCreated, nil)
	}
	two.problem(http.MethodPost, "/families/100/push-subscriptions", child, pushBody(endpoint(2), keys), http.StatusConflict, "body.endpoint")
}

// TestPushEndpointOneSpelling: the spellings of one push endpoint (host
// case, a trailing dot, the default port) are one subscription, stored and
// answered in its one spelling, and deleted by any of them; loopback and
// metadata addresses in the URL standard's other IPv4 forms are refused
// when subscribing (422 at body.endpoint), not only when dialled.
func TestPushEndpointOneSpelling(t *testing.T) {
	f := newAPIFixture(t)
	child := f.token(childA)
	keys := map[string]string{}
	if err := json.Unmarshal([]byte(testPushKeys(t)), &keys); err != nil {
		t.Fatal(err)
	}
	const one = "https://push.example.com/send/abc"
	for _, spelling := range []string{one, "https://PUSH.example.com/send/abc", "https://push.example.com./send/abc",
		"https://push.example.com:443/send/abc", "HTTPS://Push.Example.Com.:443/send/abc"} {
		var got PushSubscriptionView
		f.call(http.MethodPost, "/families/100/push-subscriptions", child, pushBody(spelling, keys), http.StatusCreated, &got)
		if got.Endpoint != one {
			t.Errorf("subscribed %s: answered %s, want %s", spelling, got.Endpoint, one)
		}
	}
	var list []PushSubscriptionView
	f.call(http.MethodGet, "/families/100/push-subscriptions", child, nil, http.StatusOK, &list)
	if len(list) != 1 || list[0].Endpoint != one {
		t.Errorf("subscriptions = %+v, want one at %s", list, one)
	}
	f.call(http.MethodDelete, "/families/100/push-subscriptions?endpoint="+url.QueryEscape("https://PUSH.example.com.:443/send/abc"), child, nil, http.StatusNoContent, nil)
	for _, bad := range []string{"https://127.1/x", "https://0x7f000001/x", "https://2130706433/x", "https://169.254.169.254./x",
		"https://0251.0376.0251.0376/x", "https://localhost./x"} {
		f.problem(http.MethodPost, "/families/100/push-subscriptions", child, pushBody(bad, keys), http.StatusUnprocessableEntity, "body.endpoint")
	}
}
