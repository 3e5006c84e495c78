package notify

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/pushtest"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/writebehind"
)

// memSubs is an in-memory SubscriptionStore: members with roles and their
// subscriptions, recipients by Filter.Sees.
type memSubs struct {
	mu      sync.Mutex
	roles   map[int64]Role // member → role (one family)
	subs    []PushSubscription
	removed []string
	fail    error
}

func (m *memSubs) PushRecipients(ctx context.Context, family, member int64) ([]PushSubscription, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return nil, m.fail
	}
	var out []PushSubscription
	for _, s := range m.subs {
		if (Filter{MemberID: s.MemberID, Role: m.roles[s.MemberID]}).Sees(Notification{MemberID: member}) {
			s.Role = string(m.roles[s.MemberID])
			out = append(out, s)
		}
	}
	return out, nil
}

func (m *memSubs) RemovePushSubscription(ctx context.Context, endpoint string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removed = append(m.removed, endpoint)
	m.subs = slices.DeleteFunc(m.subs, func(s PushSubscription) bool { return s.Endpoint == endpoint })
	return nil
}

func (m *memSubs) endpoints() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, s := range m.subs {
		out = append(out, s.Endpoint)
	}
	return out
}

// pushDelivery is a pushtest.Delivery with its message decoded.
type pushDelivery struct {
	Path    string
	TTL     string
	Urgency string
	Msg     PushMessage
}

func subscribe(ps *pushtest.Server, member int64, path string) PushSubscription {
	e, p, a := ps.Subscribe(path)
	return PushSubscription{MemberID: member, Endpoint: e, P256dh: p, Auth: a}
}

// deliveries decodes what ps accepted, strictly (no unknown fields).
func deliveries(t *testing.T, ps *pushtest.Server) ([]pushDelivery, []string) {
	t.Helper()
	got, bad := ps.Deliveries()
	var out []pushDelivery
	for _, d := range got {
		var m PushMessage
		dec := json.NewDecoder(bytes.NewReader(d.JSON))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("push payload %s: %v", d.JSON, err)
		}
		out = append(out, pushDelivery{Path: d.Path, TTL: d.TTL, Urgency: d.Urgency, Msg: m})
	}
	return out, bad
}

func newVAPID(t *testing.T) VAPIDKeys {
	t.Helper()
	k, err := GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// The channel end to end: notification events through kfake and the
// notifier to a push service that verifies VAPID and decrypts each
// message; each goes to the members who see it, in Korean, with TTL and
// urgency; QUOTA_UPDATED is not pushed.
func TestWebPushEndToEnd(t *testing.T) {
	keys := newVAPID(t)
	ps := pushtest.New(t, keys.Public)
	subs := &memSubs{roles: map[int64]Role{1: RoleOwner, 2: RoleMember, 3: RoleMember}}
	subs.subs = []PushSubscription{subscribe(ps, 1, "/owner"), subscribe(ps, 2, "/child"), subscribe(ps, 3, "/other")}
	wp, err := NewWebPush(subs, keys, "mailto:ops@dpcs.example", WithPushHTTPClient(ps.Client()), WithPushTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if wp.PublicKey() != keys.Public {
		t.Errorf("PublicKey = %q, want %q", wp.PublicKey(), keys.Public)
	}
	c := newFake(t)
	hub, _ := newHubSub(t, 100, Filter{MemberID: 1, Role: RoleOwner})
	var mu sync.Mutex
	var sends []SendInfo
	n, errc := startNotifier(t, c, newInbox(t, openSQLite(t)), hub, WithChannel("webpush", wp, DefaultWebPushKinds()...),
		WithHooks(Hooks{OnSend: func(i SendInfo) { mu.Lock(); sends = append(sends, i); mu.Unlock() }}))
	produce(t, testenv.Producer(t, c), blockedRec(t, "ntf_b", 100, 2), quotaRec(t, "ntf_q", 100, 2), thresholdRec(t, "ntf_t", 100, 30, "2026-02"))
	testenv.Eventually(t, "2 push sends", 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(sends) == 2 })
	stopNotifier(t, n, errc)

	got, bad := deliveries(t, ps)
	if len(bad) > 0 {
		t.Fatalf("push service refused: %q", bad)
	}
	for _, s := range sends {
		if s.Err != nil {
			t.Errorf("send %s: %v", s.EventID, s.Err)
		}
	}
	slices.SortFunc(got, func(a, b pushDelivery) int { return strings.Compare(a.Msg.EventID+a.Path, b.Msg.EventID+b.Path) })
	blocked := PushMessage{Title: "데이터 차단", Body: "가족 데이터를 모두 사용하여 차단되었습니다. 보호자가 충전하면 다시 쓸 수 있습니다.", Tag: "ntf_b",
		URL: "/app/#inbox", Kind: envelope.SubCustomerBlocked, EventID: "ntf_b", FamilyID: 100, MemberID: 2, Lang: Korean}
	// Only owners can top up: the owner's alert offers it, a child's says
	// to ask a parent (#38).
	threshold := PushMessage{Title: "가족 데이터 잔여량 알림", Body: "가족 데이터가 30% 미만입니다! 데이터를 충전해주세요.", Tag: "ntf_t",
		URL: "/app/#inbox", Kind: envelope.SubThresholdAlert, EventID: "ntf_t", FamilyID: 100, Lang: Korean, TopUp: true}
	thresholdMember := threshold
	thresholdMember.Body, thresholdMember.TopUp = "가족 데이터가 30% 미만 남았습니다. 더 필요하면 보호자에게 부탁하세요.", false
	want := []pushDelivery{
		{Path: "/child", TTL: "3600", Urgency: "high", Msg: blocked},
		{Path: "/owner", TTL: "3600", Urgency: "high", Msg: blocked},
		{Path: "/child", TTL: "3600", Urgency: "normal", Msg: thresholdMember},
		{Path: "/other", TTL: "3600", Urgency: "normal", Msg: thresholdMember},
		{Path: "/owner", TTL: "3600", Urgency: "normal", Msg: threshold},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
}

// A 410 (or 404) answer removes the subscription and is not an error; a
// 500 is retried on the schedule and then dead-lettered with the channel's
// name, while the other subscriptions still get the message.
func TestWebPushGoneAndRetried(t *testing.T) {
	keys := newVAPID(t)
	ps := pushtest.New(t, keys.Public)
	subs := &memSubs{roles: map[int64]Role{1: RoleOwner, 2: RoleMember}}
	owner, gone, expired := subscribe(ps, 1, "/owner"), subscribe(ps, 2, "/gone"), subscribe(ps, 2, "/expired")
	subs.subs = []PushSubscription{owner, gone, expired}
	ps.SetStatus("/gone", http.StatusGone)
	ps.SetStatus("/expired", http.StatusNotFound)
	wp, err := NewWebPush(subs, keys, "https://dpcs.example/contact", WithPushHTTPClient(ps.Client()))
	if err != nil {
		t.Fatal(err)
	}
	c := newFake(t)
	hub, _ := newHubSub(t, 100, Filter{MemberID: 1, Role: RoleOwner})
	sl := &fakeSleep{}
	var mu sync.Mutex
	var sends []SendInfo
	n, errc := startNotifier(t, c, newInbox(t, openSQLite(t)), hub, WithSleep(sl.sleep), WithChannelWorkers(1),
		WithChannel("webpush", wp, DefaultWebPushKinds()...),
		WithHooks(Hooks{OnSend: func(i SendInfo) { mu.Lock(); sends = append(sends, i); mu.Unlock() }}))
	pr := testenv.Producer(t, c)
	produce(t, pr, blockedRec(t, "ntf_gone", 100, 2))
	testenv.Eventually(t, "the first push sent", 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(sends) == 1 })
	if diff := cmp.Diff([]string{owner.Endpoint}, subs.endpoints()); diff != "" {
		t.Errorf("subscriptions left after 410/404 (-want +got):\n%s", diff)
	}
	if sends[0].Err != nil {
		t.Errorf("a gone subscription failed the send: %v", sends[0].Err)
	}

	ps.SetStatus("/owner", http.StatusInternalServerError)
	produce(t, pr, thresholdRec(t, "ntf_500", 100, 10, "2026-02"))
	dl := testenv.Read(t, c, dlt, 1)
	stopNotifier(t, n, errc)
	if got := header(dl[0], HeaderDLTChannel); got != "webpush" {
		t.Errorf("dlt-channel = %q", got)
	}
	if r := header(dl[0], writebehind.HeaderDLTReason); !strings.Contains(r, "4 attempts failed") || !strings.Contains(r, "500") {
		t.Errorf("dlt reason = %q", r)
	}
	if diff := cmp.Diff([]time.Duration{time.Second, 5 * time.Second, 30 * time.Second}, sl.got()); diff != "" {
		t.Errorf("retry waits (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{owner.Endpoint}, subs.endpoints()); diff != "" {
		t.Errorf("a 500 removed a subscription (-want +got):\n%s", diff)
	}
	if _, bad := deliveries(t, ps); len(bad) > 0 {
		t.Errorf("push service refused: %q", bad)
	}
}

// Send's answer for each kind of push service reply, and a store error.
func TestWebPushSendOutcomes(t *testing.T) {
	keys := newVAPID(t)
	for _, tc := range []struct {
		name      string
		status    int
		storeErr  error
		wantErr   bool
		permanent bool
		removed   bool
	}{
		{name: "created", status: http.StatusCreated},
		{name: "gone", status: http.StatusGone, removed: true},
		{name: "not found", status: http.StatusNotFound, removed: true},
		{name: "server error", status: http.StatusBadGateway, wantErr: true},
		{name: "too many", status: http.StatusTooManyRequests, wantErr: true},
		{name: "wrong key", status: http.StatusForbidden, wantErr: true, permanent: true},
		{name: "too large", status: http.StatusRequestEntityTooLarge, wantErr: true, permanent: true},
		{name: "store down", status: http.StatusCreated, storeErr: errors.New("db down"), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := pushtest.New(t, keys.Public)
			subs := &memSubs{roles: map[int64]Role{1: RoleOwner}, fail: tc.storeErr}
			s := subscribe(ps, 1, "/s")
			subs.subs = []PushSubscription{s}
			ps.SetStatus("/s", tc.status)
			wp, err := NewWebPush(subs, keys, "mailto:ops@dpcs.example", WithPushHTTPClient(ps.Client()), WithPushLang(English))
			if err != nil {
				t.Fatal(err)
			}
			err = wp.Send(context.Background(), Notification{EventID: "e1", FamilyID: 100, MemberID: 1, Kind: KindDataRequested,
				Title: "데이터 요청", Body: "더 필요해요", Payload: json.RawMessage(`{"familyId":100,"requestId":7,"customerId":1}`)})
			if (err != nil) != tc.wantErr || errors.Is(err, ErrPermanent) != tc.permanent {
				t.Errorf("Send = %v, want error %v permanent %v", err, tc.wantErr, tc.permanent)
			}
			if got := len(subs.removed) == 1; got != tc.removed {
				t.Errorf("removed = %q", subs.removed)
			}
			if got, bad := deliveries(t, ps); len(bad) > 0 {
				t.Errorf("push service refused: %q", bad)
			} else if tc.status == http.StatusCreated && tc.storeErr == nil {
				// A kind notify cannot render keeps the notifier's texts.
				want := []pushDelivery{{Path: "/s", TTL: "86400", Urgency: "high", Msg: PushMessage{Title: "데이터 요청", Body: "더 필요해요",
					Tag: "e1", URL: "/app/#inbox", Kind: KindDataRequested, EventID: "e1", FamilyID: 100, MemberID: 1, Lang: English,
					RequestID: 7}}} // the service worker answers it from the notification
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("deliveries (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestValidatePushSubscription(t *testing.T) {
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p256 := base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes())
	auth := base64.RawURLEncoding.EncodeToString(make([]byte, 16))
	offCurve := append([]byte{4}, bytes.Repeat([]byte{1}, 64)...)
	for _, tc := range []struct {
		name     string
		s        PushSubscription
		loopback bool
		ok       bool
	}{
		{name: "https", s: PushSubscription{Endpoint: "https://fcm.googleapis.com/fcm/send/abc", P256dh: p256, Auth: auth}, ok: true},
		{name: "padded base64", s: PushSubscription{Endpoint: "https://push.example/x", P256dh: base64.URLEncoding.EncodeToString(priv.PublicKey().Bytes()), Auth: base64.URLEncoding.EncodeToString(make([]byte, 16))}, ok: true},
		{name: "http loopback allowed", s: PushSubscription{Endpoint: "http://127.0.0.1:1234/x", P256dh: p256, Auth: auth}, loopback: true, ok: true},
		{name: "http loopback not allowed", s: PushSubscription{Endpoint: "http://127.0.0.1:1234/x", P256dh: p256, Auth: auth}},
		{name: "http elsewhere", s: PushSubscription{Endpoint: "http://push.example/x", P256dh: p256, Auth: auth}, loopback: true},
		{name: "not a URL", s: PushSubscription{Endpoint: "push.example/x", P256dh: p256, Auth: auth}},
		{name: "ftp", s: PushSubscription{Endpoint: "ftp://push.example/x", P256dh: p256, Auth: auth}},
		{name: "short key", s: PushSubscription{Endpoint: "https://push.example/x", P256dh: p256[:40], Auth: auth}},
		{name: "off curve", s: PushSubscription{Endpoint: "https://push.example/x", P256dh: base64.RawURLEncoding.EncodeToString(offCurve), Auth: auth}},
		{name: "short auth", s: PushSubscription{Endpoint: "https://push.example/x", P256dh: p256, Auth: auth[:10]}},
		{name: "not base64", s: PushSubscription{Endpoint: "https://push.example/x", P256dh: p256, Auth: "!!!!!!!!!!!!!!!!!!!!!!"}},
		// An address literal the dial guard refuses is refused at once.
		{name: "carrier-grade NAT", s: PushSubscription{Endpoint: "https://100.64.0.1/x", P256dh: p256, Auth: auth}},
		{name: "cloud metadata in CGNAT", s: PushSubscription{Endpoint: "https://100.100.100.200/x", P256dh: p256, Auth: auth}},
		{name: "benchmarking", s: PushSubscription{Endpoint: "https://198.18.0.1/x", P256dh: p256, Auth: auth}},
		{name: "NAT64", s: PushSubscription{Endpoint: "https://[64:ff9b::a00:1]/x", P256dh: p256, Auth: auth}},
		{name: "6to4", s: PushSubscription{Endpoint: "https://[2002:a00:1::1]/x", P256dh: p256, Auth: auth}},
		{name: "private", s: PushSubscription{Endpoint: "https://10.0.0.1/x", P256dh: p256, Auth: auth}},
		{name: "link-local metadata", s: PushSubscription{Endpoint: "https://169.254.169.254/x", P256dh: p256, Auth: auth}},
		{name: "IPv4-mapped private", s: PushSubscription{Endpoint: "https://[::ffff:10.0.0.1]/x", P256dh: p256, Auth: auth}},
		{name: "link-local with zone", s: PushSubscription{Endpoint: "https://[fe80::1%25eth0]/x", P256dh: p256, Auth: auth}},
		{name: "https loopback not allowed", s: PushSubscription{Endpoint: "https://127.0.0.1/x", P256dh: p256, Auth: auth}},
		{name: "IPv6 loopback not allowed", s: PushSubscription{Endpoint: "https://[::1]/x", P256dh: p256, Auth: auth}},
		{name: "localhost not allowed", s: PushSubscription{Endpoint: "https://localhost/x", P256dh: p256, Auth: auth}},
		{name: "a .localhost name", s: PushSubscription{Endpoint: "https://push.localhost/x", P256dh: p256, Auth: auth}},
		{name: "port the guard refuses", s: PushSubscription{Endpoint: "https://push.example:8443/x", P256dh: p256, Auth: auth}},
		{name: "private even with loopback allowed", s: PushSubscription{Endpoint: "http://10.0.0.1:1234/x", P256dh: p256, Auth: auth}, loopback: true},
		{name: "public literal", s: PushSubscription{Endpoint: "https://142.250.196.10/x", P256dh: p256, Auth: auth}, ok: true},
		{name: "public IPv6 literal", s: PushSubscription{Endpoint: "https://[2607:f8b0:4004::1]:443/x", P256dh: p256, Auth: auth}, ok: true},
		{name: "https loopback allowed, any port", s: PushSubscription{Endpoint: "https://127.0.0.1:8443/x", P256dh: p256, Auth: auth}, loopback: true, ok: true},
		{name: "http localhost allowed", s: PushSubscription{Endpoint: "http://localhost:1234/x", P256dh: p256, Auth: auth}, loopback: true, ok: true},
		// Other spellings of loopback and metadata addresses (the WHATWG
		// URL standard's IPv4 forms, which browsers and many HTTP stacks
		// read as addresses) are refused at once too.
		{name: "short loopback", s: PushSubscription{Endpoint: "https://127.1/x", P256dh: p256, Auth: auth}},
		{name: "hex loopback", s: PushSubscription{Endpoint: "https://0x7f000001/x", P256dh: p256, Auth: auth}},
		{name: "decimal loopback", s: PushSubscription{Endpoint: "https://2130706433/x", P256dh: p256, Auth: auth}},
		{name: "octal loopback", s: PushSubscription{Endpoint: "https://0177.0.0.1/x", P256dh: p256, Auth: auth}},
		{name: "metadata, trailing dot", s: PushSubscription{Endpoint: "https://169.254.169.254./x", P256dh: p256, Auth: auth}},
		{name: "localhost, trailing dot", s: PushSubscription{Endpoint: "https://localhost./x", P256dh: p256, Auth: auth}},
		{name: "not an address, ends in a number", s: PushSubscription{Endpoint: "https://push.example.256/x", P256dh: p256, Auth: auth}},
		{name: "mixed-case host", s: PushSubscription{Endpoint: "https://PUSH.Example.com./x", P256dh: p256, Auth: auth}, ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidatePushSubscription(tc.s, tc.loopback)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Errorf("ValidatePushSubscription = %v, want ok %v", err, tc.ok)
			}
		})
	}
}

// TestNormalizePushEndpoint: one push endpoint has one spelling — scheme
// and host in lower case, no trailing dot, no default port, IPv4 in dotted
// decimal — and the rest of the URL is kept byte for byte.
func TestNormalizePushEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"https://push.example.com/x":            "https://push.example.com/x",
		"https://PUSH.example.com/x":            "https://push.example.com/x",
		"HTTPS://push.example.com./x":           "https://push.example.com/x",
		"https://push.example.com:443/x":        "https://push.example.com/x",
		"https://Push.Example.COM.:443/a%2Fb?Q": "https://push.example.com/a%2Fb?Q",
		"https://push.example.com:0443/x":       "https://push.example.com/x",
		"https://push.example.com":              "https://push.example.com",
		"https://8.8.8.8:443/x":                 "https://8.8.8.8/x",
		"https://0x08.0x08.0x08.0x08/x":         "https://8.8.8.8/x",
		"https://134744072/x":                   "https://8.8.8.8/x",
		"https://[2607:F8B0:4004::1]:443/x":     "https://[2607:f8b0:4004::1]/x",
		"http://127.0.0.1:80/x":                 "http://127.0.0.1/x",
		"http://127.0.0.1:1234/x":               "http://127.0.0.1:1234/x",
	} {
		got, err := NormalizePushEndpoint(in)
		if err != nil || got != want {
			t.Errorf("NormalizePushEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"push.example/x", "https://user@push.example/x", "https:///x", "https://1.2.3.4.5/x",
		"https://0x100000000/x", "https://256.1.1.1/x", "https://4294967296/x", "https://push.example:99999/x"} {
		if got, err := NormalizePushEndpoint(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("NormalizePushEndpoint(%q) = %q, %v; want ErrInvalid", in, got, err)
		}
	}
}

func TestNewWebPushValidates(t *testing.T) {
	keys, other := newVAPID(t), newVAPID(t)
	subs := &memSubs{}
	for _, tc := range []struct {
		name    string
		keys    VAPIDKeys
		subject string
	}{
		{name: "mismatched pair", keys: VAPIDKeys{Public: other.Public, Private: keys.Private}, subject: "mailto:a@b.example"},
		{name: "bad private", keys: VAPIDKeys{Public: keys.Public, Private: "xx"}, subject: "mailto:a@b.example"},
		{name: "bad subject", keys: keys, subject: "ops@dpcs.example"},
		{name: "http subject", keys: keys, subject: "http://dpcs.example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewWebPush(subs, tc.keys, tc.subject); !errors.Is(err, ErrInvalid) {
				t.Errorf("NewWebPush = %v, want ErrInvalid", err)
			}
		})
	}
	if err := keys.Validate(); err != nil {
		t.Errorf("generated keys: %v", err)
	}
	padded := VAPIDKeys{Public: keys.Public + "=", Private: keys.Private + "="}
	if _, err := NewWebPush(subs, padded, "mailto:a@b.example"); err != nil {
		t.Errorf("padded keys: %v", err)
	}
}

// The default client refuses endpoints on addresses that are not public
// (here the loopback push service): a member cannot make the notifier POST
// into the deployment's network. Permanent: retrying will not change it.
func TestWebPushRefusesInternalAddresses(t *testing.T) {
	keys := newVAPID(t)
	ps := pushtest.New(t, keys.Public)
	subs := &memSubs{roles: map[int64]Role{1: RoleOwner}}
	subs.subs = []PushSubscription{subscribe(ps, 1, "/s")}
	wp, err := NewWebPush(subs, keys, "mailto:ops@dpcs.example")
	if err != nil {
		t.Fatal(err)
	}
	err = wp.Send(context.Background(), Notification{EventID: "e1", FamilyID: 100, Kind: envelope.SubThresholdAlert})
	if !errors.Is(err, ErrNotPublic) || !errors.Is(err, ErrPermanent) {
		t.Errorf("Send = %v, want ErrNotPublic, permanent", err)
	}
	if got, _ := ps.Deliveries(); len(got) != 0 {
		t.Errorf("delivered %d to a loopback endpoint", len(got))
	}
}

// The dial guard refuses every special-purpose range, not only loopback,
// private and link-local ones: a penetration test reached carrier-grade NAT
// (100.64.0.0/10, where clouds put metadata services such as
// 100.100.100.200), benchmarking (198.18.0.0/15), NAT64 (64:ff9b::/96) and
// 6to4 (2002::/16) through the hand-written check this replaced. Ports other
// than 80 and 443 are refused too.
func TestPublicOnlyDialerRefusesSpecialPurposeRanges(t *testing.T) {
	network := func(addr string) string {
		if strings.HasPrefix(addr, "[") {
			return "tcp6"
		}
		return "tcp4"
	}
	for _, addr := range []string{
		"10.1.2.3:443", "192.168.0.1:443", "169.254.169.254:80", "[::1]:443", "[fd00::1]:443", "0.0.0.0:443",
		"100.64.0.1:443", "100.100.100.200:80", "100.127.255.254:443", "198.18.0.1:443", "198.19.255.1:443",
		"192.0.0.8:443", "192.0.2.1:443", "240.0.0.1:443", "224.0.0.1:443", "255.255.255.255:443",
		"[64:ff9b::a00:1]:443", "[64:ff9b::6440:1]:443", "[2002:a00:1::1]:443", "[2001:db8::1]:443",
		"[fe80::1]:443", "[ff02::1]:443", "[::ffff:a00:1]:443",
		"142.250.196.10:22", "142.250.196.10:8443",
	} {
		if err := PublicOnlyDialer().Control(network(addr), addr, nil); !errors.Is(err, ErrNotPublic) {
			t.Errorf("%s: %v, want ErrNotPublic", addr, err)
		}
	}
	for _, addr := range []string{"142.250.196.10:443", "142.250.196.10:80", "[2607:f8b0:4004::1]:443"} {
		if err := PublicOnlyDialer().Control(network(addr), addr, nil); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
}

// GuardedDialer opens the networks it is given, on any port, and loopback
// only when asked; everything else is refused as PublicOnlyDialer refuses it.
func TestGuardedDialerAllowsOnlyWhatItIsGiven(t *testing.T) {
	d := GuardedDialer(time.Second, false, netip.MustParsePrefix("10.20.0.0/16"))
	for addr, ok := range map[string]bool{
		"10.20.1.2:29510": true, "10.21.1.2:29510": false, "127.0.0.1:8080": false, "[::ffff:10.20.1.2]:80": true,
		"142.250.196.10:443": true, "142.250.196.10:8443": false, "169.254.169.254:80": false,
	} {
		network := "tcp4"
		if strings.HasPrefix(addr, "[") {
			network = "tcp6"
		}
		if err := d.Control(network, addr, nil); (err == nil) != ok {
			t.Errorf("%s: %v, want allowed %v", addr, err, ok)
		}
	}
	if err := GuardedDialer(time.Second, true).Control("tcp4", "127.0.0.1:8080", nil); err != nil {
		t.Errorf("loopback: %v", err)
	}
}

// A subscription stored with an endpoint in carrier-grade NAT or NAT64 (a
// hostname can resolve there too) is refused when it is dialled: at once,
// with no connection attempted, and for good.
func TestWebPushRefusesSpecialPurposeAtDial(t *testing.T) {
	keys := newVAPID(t)
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p256 := base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes())
	auth := base64.RawURLEncoding.EncodeToString(make([]byte, 16))
	for _, endpoint := range []string{"https://100.64.0.1/push/x", "https://100.100.100.200/latest/meta-data",
		"https://198.18.0.1/x", "https://[64:ff9b::a9fe:a9fe]/x", "https://[2002:a9fe:a9fe::1]/x"} {
		t.Run(endpoint, func(t *testing.T) {
			subs := &memSubs{roles: map[int64]Role{1: RoleOwner}, subs: []PushSubscription{{MemberID: 1, Endpoint: endpoint, P256dh: p256, Auth: auth}}}
			wp, err := NewWebPush(subs, keys, "mailto:ops@dpcs.example")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = wp.Send(ctx, Notification{EventID: "e1", FamilyID: 100, Kind: envelope.SubThresholdAlert})
			if !errors.Is(err, ErrNotPublic) || !errors.Is(err, ErrPermanent) {
				t.Errorf("Send = %v, want ErrNotPublic, permanent", err)
			}
		})
	}
}

// The loopback escape hatch (tests with a local push service, the
// all-in-one's AllowLoopbackPush) opens loopback only: the push service on
// 127.0.0.1 gets the message, every other refused range stays refused.
func TestWebPushLoopbackOpensLoopbackOnly(t *testing.T) {
	keys := newVAPID(t)
	ps := pushtest.New(t, keys.Public)
	subs := &memSubs{roles: map[int64]Role{1: RoleOwner}}
	subs.subs = []PushSubscription{subscribe(ps, 1, "/s")}
	wp, err := NewWebPush(subs, keys, "mailto:ops@dpcs.example", WithPushLoopback())
	if err != nil {
		t.Fatal(err)
	}
	if err := wp.Send(context.Background(), Notification{EventID: "e1", FamilyID: 100, Kind: envelope.SubThresholdAlert}); err != nil {
		t.Fatalf("Send to the loopback push service: %v", err)
	}
	if got, bad := ps.Deliveries(); len(got) != 1 || len(bad) != 0 {
		t.Errorf("deliveries %d, refused %q", len(got), bad)
	}
	inner := subscribe(ps, 1, "/cgnat")
	inner.Endpoint = "https://100.64.0.1/cgnat"
	subs.subs = []PushSubscription{inner}
	if err := wp.Send(context.Background(), Notification{EventID: "e2", FamilyID: 100, Kind: envelope.SubThresholdAlert}); !errors.Is(err, ErrNotPublic) {
		t.Errorf("Send to 100.64.0.1 with loopback open = %v, want ErrNotPublic", err)
	}
}

// A push service answering with a redirect is not followed: the endpoint
// is the URL the browser gave, and a redirect could point anywhere.
func TestWebPushDoesNotFollowRedirects(t *testing.T) {
	keys := newVAPID(t)
	ps := pushtest.New(t, keys.Public)
	target := subscribe(ps, 1, "/target")
	var redirected atomic.Int32
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		redirected.Add(1)
		http.Redirect(w, r, target.Endpoint, http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	s := target
	s.Endpoint = redirector.URL + "/moved"
	subs := &memSubs{roles: map[int64]Role{1: RoleOwner}, subs: []PushSubscription{s}}
	wp, err := NewWebPush(subs, keys, "mailto:ops@dpcs.example", WithPushLoopback())
	if err != nil {
		t.Fatal(err)
	}
	err = wp.Send(context.Background(), Notification{EventID: "e1", FamilyID: 100, Kind: envelope.SubThresholdAlert})
	if !errors.Is(err, ErrPermanent) || redirected.Load() != 1 {
		t.Errorf("Send = %v after %d requests to the redirector, want a permanent failure after 1", err, redirected.Load())
	}
	if got, bad := ps.Deliveries(); len(got)+len(bad) != 0 {
		t.Errorf("the redirect was followed: %d delivered, %q refused", len(got), bad)
	}
}

// A request for time is approved from its notification with its minutes,
// not with a grant of data: the push says its kind and minutes.
func TestPushMessageTimeRequest(t *testing.T) {
	keys, err := GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	wp, err := NewWebPush(&memSubs{}, keys, "mailto:ops@dpcs.example")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		payload string
		kind    string
		minutes int64
	}{
		{`{"familyId":100,"requestId":8,"customerId":1,"kind":"TIME","minutes":30}`, "TIME", 30},
		{`{"familyId":100,"requestId":9,"customerId":1,"kind":"APP","appId":"com.youtube.app","minutes":15}`, "APP", 15},
		{`{"familyId":100,"requestId":7,"customerId":1,"amountBytes":5}`, "", 0},
	} {
		m := wp.message(Notification{EventID: "e", FamilyID: 100, Kind: KindDataRequested, Payload: json.RawMessage(c.payload)})
		if m.RequestID == 0 || m.RequestKind != c.kind || m.Minutes != c.minutes {
			t.Errorf("%s: push %+v, want kind %q minutes %d", c.payload, m, c.kind, c.minutes)
		}
	}
}
