package notify

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/writebehind"
)

// pushService is a push service for tests: each subscription is a path of
// its server. It checks every request as a browser vendor's service would
// (VAPID JWT signed by the announced key, for this origin, not expired; the
// RFC 8291 headers), decrypts the body with the browser's private key and
// auth secret, and answers with the status set for the path (201 unless
// set).
type pushService struct {
	t      *testing.T
	srv    *httptest.Server
	vapid  string // the expected application server key, base64url
	mu     sync.Mutex
	keys   map[string]pushBrowser
	status map[string]int
	got    []pushDelivery
	bad    []string
}

type pushBrowser struct {
	priv *ecdh.PrivateKey
	auth []byte
}

type pushDelivery struct {
	Path    string
	TTL     string
	Urgency string
	Msg     PushMessage
}

func newPushService(t *testing.T, vapidPublic string) *pushService {
	p := &pushService{t: t, vapid: vapidPublic, keys: map[string]pushBrowser{}, status: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

// subscribe makes a browser's subscription at path for member.
func (p *pushService) subscribe(member int64, path string) PushSubscription {
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	auth := make([]byte, 16)
	rand.Read(auth)
	p.mu.Lock()
	p.keys[path] = pushBrowser{priv: priv, auth: auth}
	p.mu.Unlock()
	return PushSubscription{MemberID: member, Endpoint: p.srv.URL + path,
		P256dh: base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes()), Auth: base64.RawURLEncoding.EncodeToString(auth)}
}

func (p *pushService) setStatus(path string, code int) {
	p.mu.Lock()
	p.status[path] = code
	p.mu.Unlock()
}

func (p *pushService) deliveries() ([]pushDelivery, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.got), slices.Clone(p.bad)
}

func (p *pushService) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	defer p.mu.Unlock()
	fail := func(format string, args ...any) {
		p.bad = append(p.bad, r.URL.Path+": "+fmt.Sprintf(format, args...))
		http.Error(w, "bad request", http.StatusBadRequest)
	}
	b, ok := p.keys[r.URL.Path]
	if !ok {
		fail("unknown subscription")
		return
	}
	if err := checkVAPID(r.Header.Get("Authorization"), p.vapid, p.srv.URL, time.Now()); err != nil {
		fail("vapid: %v", err)
		return
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "aes128gcm" {
		fail("Content-Encoding %q", ce)
		return
	}
	plain, err := decryptAES128GCM(body, b.priv, b.auth)
	if err != nil {
		fail("decrypt: %v", err)
		return
	}
	var m PushMessage
	dec := json.NewDecoder(bytes.NewReader(plain))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		fail("payload %q: %v", plain, err)
		return
	}
	if code := p.status[r.URL.Path]; code >= 300 {
		http.Error(w, http.StatusText(code), code)
		return
	}
	p.got = append(p.got, pushDelivery{Path: r.URL.Path, TTL: r.Header.Get("TTL"), Urgency: r.Header.Get("Urgency"), Msg: m})
	w.WriteHeader(http.StatusCreated)
}

// checkVAPID checks an RFC 8292 Authorization header: "vapid t=JWT, k=key",
// the key the application server's, the JWT signed with it (ES256), for
// origin, expiring in the future and within 24 h, with a contact subject.
func checkVAPID(h, wantKey, origin string, now time.Time) error {
	rest, ok := strings.CutPrefix(h, "vapid ")
	if !ok {
		return fmt.Errorf("scheme of %q", h)
	}
	params := map[string]string{}
	for _, kv := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		params[k] = v
	}
	if params["k"] != wantKey {
		return fmt.Errorf("k = %q, want %q", params["k"], wantKey)
	}
	rawKey, err := base64.RawURLEncoding.DecodeString(params["k"])
	if err != nil {
		return err
	}
	pub, err := ecdh.P256().NewPublicKey(rawKey)
	if err != nil {
		return err
	}
	x, y := new(big.Int).SetBytes(pub.Bytes()[1:33]), new(big.Int).SetBytes(pub.Bytes()[33:])
	parts := strings.Split(params["t"], ".")
	if len(parts) != 3 {
		return fmt.Errorf("JWT has %d parts", len(parts))
	}
	var hdr struct{ Alg, Typ string }
	if err := decodeJWTPart(parts[0], &hdr); err != nil || hdr.Alg != "ES256" {
		return fmt.Errorf("JWT header %+v: %v", hdr, err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return fmt.Errorf("JWT signature: %d bytes, %v", len(sig), err)
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	key := &ecdsa.PublicKey{Curve: elliptic.P256(), X: x, Y: y}
	if !ecdsa.Verify(key, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
		return errors.New("JWT signature does not verify")
	}
	var claims struct {
		Aud string
		Exp int64
		Sub string
	}
	if err := decodeJWTPart(parts[1], &claims); err != nil {
		return err
	}
	if claims.Aud != origin {
		return fmt.Errorf("aud = %q, want %q", claims.Aud, origin)
	}
	if exp := time.Unix(claims.Exp, 0); !exp.After(now) || exp.After(now.Add(24*time.Hour)) {
		return fmt.Errorf("exp %v not within 24 h after %v", exp, now)
	}
	if !strings.HasPrefix(claims.Sub, "mailto:") && !strings.HasPrefix(claims.Sub, "https:") {
		return fmt.Errorf("sub = %q", claims.Sub)
	}
	return nil
}

func decodeJWTPart(s string, v any) error {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

// decryptAES128GCM reverses RFC 8291 on the browser's side: the header
// (salt, record size, the server's ephemeral key), ECDH with the browser's
// key, the two HKDF steps of §3.3-3.4, AES-128-GCM, then the padding
// delimiter of RFC 8188 §2 (one record, so 0x02).
func decryptAES128GCM(body []byte, ua *ecdh.PrivateKey, auth []byte) ([]byte, error) {
	if len(body) < 21 {
		return nil, errors.New("body shorter than the header")
	}
	salt, rs, idlen := body[:16], binary.BigEndian.Uint32(body[16:20]), int(body[20])
	if idlen != 65 || len(body) < 21+idlen+17 {
		return nil, fmt.Errorf("keyid length %d, body %d bytes", idlen, len(body))
	}
	asRaw, ct := body[21:21+idlen], body[21+idlen:]
	if uint32(len(ct)) > rs {
		return nil, fmt.Errorf("record of %d bytes larger than rs %d", len(ct), rs)
	}
	as, err := ecdh.P256().NewPublicKey(asRaw)
	if err != nil {
		return nil, err
	}
	shared, err := ua.ECDH(as)
	if err != nil {
		return nil, err
	}
	// HKDF (RFC 5869) by hand: extract = HMAC(salt, ikm); expand of ≤ 32
	// bytes = HMAC(prk, info || 0x01) truncated.
	hm := func(key, data []byte) []byte { m := hmac.New(sha256.New, key); m.Write(data); return m.Sum(nil) }
	expand := func(prk []byte, info string, n int) []byte { return hm(prk, append([]byte(info), 1))[:n] }
	keyInfo := "WebPush: info\x00" + string(ua.PublicKey().Bytes()) + string(asRaw)
	ikm := expand(hm(auth, shared), keyInfo, 32)
	prk := hm(salt, ikm)
	cek := expand(prk, "Content-Encoding: aes128gcm\x00", 16)
	nonce := expand(prk, "Content-Encoding: nonce\x00", 12)
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	plain, err := gcm.Open(nil, nonce, ct, nil)
	if err != nil {
		return nil, err
	}
	i := len(plain) - 1
	for i >= 0 && plain[i] == 0 {
		i--
	}
	if i < 0 || plain[i] != 2 {
		return nil, errors.New("no last-record padding delimiter 0x02")
	}
	return plain[:i], nil
}

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
	ps := newPushService(t, keys.Public)
	subs := &memSubs{roles: map[int64]Role{1: RoleOwner, 2: RoleMember, 3: RoleMember}}
	subs.subs = []PushSubscription{ps.subscribe(1, "/owner"), ps.subscribe(2, "/child"), ps.subscribe(3, "/other")}
	wp, err := NewWebPush(subs, keys, "mailto:ops@dpcs.example", WithPushHTTPClient(ps.srv.Client()), WithPushTTL(time.Hour))
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
	produce(t, producer(t, c), blockedRec(t, "ntf_b", 100, 2), quotaRec(t, "ntf_q", 100, 2), thresholdRec(t, "ntf_t", 100, 30, "2026-02"))
	eventually(t, "2 push sends", func() bool { mu.Lock(); defer mu.Unlock(); return len(sends) == 2 })
	stopNotifier(t, n, errc)

	got, bad := ps.deliveries()
	if len(bad) > 0 {
		t.Fatalf("push service refused: %q", bad)
	}
	for _, s := range sends {
		if s.Err != nil {
			t.Errorf("send %s: %v", s.EventID, s.Err)
		}
	}
	slices.SortFunc(got, func(a, b pushDelivery) int { return strings.Compare(a.Msg.EventID+a.Path, b.Msg.EventID+b.Path) })
	blocked := PushMessage{Title: "데이터 차단", Body: "가족 데이터를 모두 사용하여 차단되었습니다. 데이터를 충전해주세요.", Tag: "ntf_b",
		URL: "/app/#inbox", Kind: envelope.SubCustomerBlocked, EventID: "ntf_b", FamilyID: 100, MemberID: 2, Lang: Korean}
	threshold := PushMessage{Title: "가족 데이터 잔여량 알림", Body: "가족 데이터가 30% 미만입니다! 데이터를 충전해주세요.", Tag: "ntf_t",
		URL: "/app/#inbox", Kind: envelope.SubThresholdAlert, EventID: "ntf_t", FamilyID: 100, Lang: Korean}
	want := []pushDelivery{
		{Path: "/child", TTL: "3600", Urgency: "high", Msg: blocked},
		{Path: "/owner", TTL: "3600", Urgency: "high", Msg: blocked},
		{Path: "/child", TTL: "3600", Urgency: "normal", Msg: threshold},
		{Path: "/other", TTL: "3600", Urgency: "normal", Msg: threshold},
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
	ps := newPushService(t, keys.Public)
	subs := &memSubs{roles: map[int64]Role{1: RoleOwner, 2: RoleMember}}
	owner, gone, expired := ps.subscribe(1, "/owner"), ps.subscribe(2, "/gone"), ps.subscribe(2, "/expired")
	subs.subs = []PushSubscription{owner, gone, expired}
	ps.setStatus("/gone", http.StatusGone)
	ps.setStatus("/expired", http.StatusNotFound)
	wp, err := NewWebPush(subs, keys, "https://dpcs.example/contact", WithPushHTTPClient(ps.srv.Client()))
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
	pr := producer(t, c)
	produce(t, pr, blockedRec(t, "ntf_gone", 100, 2))
	eventually(t, "the first push sent", func() bool { mu.Lock(); defer mu.Unlock(); return len(sends) == 1 })
	if diff := cmp.Diff([]string{owner.Endpoint}, subs.endpoints()); diff != "" {
		t.Errorf("subscriptions left after 410/404 (-want +got):\n%s", diff)
	}
	if sends[0].Err != nil {
		t.Errorf("a gone subscription failed the send: %v", sends[0].Err)
	}

	ps.setStatus("/owner", http.StatusInternalServerError)
	produce(t, pr, thresholdRec(t, "ntf_500", 100, 10, "2026-02"))
	dl := readDLT(t, c, 1)
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
	if _, bad := ps.deliveries(); len(bad) > 0 {
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
			ps := newPushService(t, keys.Public)
			subs := &memSubs{roles: map[int64]Role{1: RoleOwner}, fail: tc.storeErr}
			s := ps.subscribe(1, "/s")
			subs.subs = []PushSubscription{s}
			ps.setStatus("/s", tc.status)
			wp, err := NewWebPush(subs, keys, "mailto:ops@dpcs.example", WithPushHTTPClient(ps.srv.Client()), WithPushLang(English))
			if err != nil {
				t.Fatal(err)
			}
			err = wp.Send(context.Background(), Notification{EventID: "e1", FamilyID: 100, MemberID: 1, Kind: KindDataRequested,
				Title: "데이터 요청", Body: "더 필요해요"})
			if (err != nil) != tc.wantErr || errors.Is(err, ErrPermanent) != tc.permanent {
				t.Errorf("Send = %v, want error %v permanent %v", err, tc.wantErr, tc.permanent)
			}
			if got := len(subs.removed) == 1; got != tc.removed {
				t.Errorf("removed = %q", subs.removed)
			}
			if got, bad := ps.deliveries(); len(bad) > 0 {
				t.Errorf("push service refused: %q", bad)
			} else if tc.status == http.StatusCreated && tc.storeErr == nil {
				// A kind notify cannot render keeps the notifier's texts.
				want := []pushDelivery{{Path: "/s", TTL: "86400", Urgency: "high", Msg: PushMessage{Title: "데이터 요청", Body: "더 필요해요",
					Tag: "e1", URL: "/app/#inbox", Kind: KindDataRequested, EventID: "e1", FamilyID: 100, MemberID: 1, Lang: English}}}
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidatePushSubscription(tc.s, tc.loopback)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Errorf("ValidatePushSubscription = %v, want ok %v", err, tc.ok)
			}
		})
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
