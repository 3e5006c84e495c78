package notify

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/notify/pushsub"
)

// The ask-for-more notification kinds (sent to a family's owners when a
// member asks for more data, and to the member when an owner answers). They
// are named here as strings so the push channel can deliver them by
// default; the envelope package defines the events.
const (
	KindDataRequested       envelope.SubType = "DATA_REQUESTED"
	KindDataRequestAnswered envelope.SubType = "DATA_REQUEST_ANSWERED"
)

// DefaultWebPushKinds returns the kinds a web push channel delivers unless
// configured otherwise: CUSTOMER_BLOCKED, THRESHOLD_ALERT, the
// ask-for-more kinds, DATA_GIFTED and the owners' WEEKLY_SUMMARY. Pass
// them (or another set) to WithChannel.
func DefaultWebPushKinds() []envelope.SubType {
	return []envelope.SubType{envelope.SubCustomerBlocked, envelope.SubThresholdAlert, KindDataRequested, KindDataRequestAnswered,
		envelope.SubDataGifted, KindWeeklySummary}
}

// PushSubscription is a browser's push subscription (the Push API's
// PushSubscription): where to post and the keys to encrypt for
// (notify/pushsub, which a store of them imports without this sender).
type PushSubscription = pushsub.Subscription

// SubscriptionStore is what WebPush needs of the subscriptions' store.
type SubscriptionStore interface {
	// PushRecipients returns the push subscriptions of the members of
	// family who see a notification about member (0: family-wide), by the
	// rule of Filter.Sees: the owners' and member's own or, for a
	// family-wide one, every member's.
	PushRecipients(ctx context.Context, familyID, memberID int64) ([]PushSubscription, error)
	// RemovePushSubscription deletes the subscription with this endpoint
	// (none: nil). WebPush calls it when the push service says the
	// subscription is gone (404, 410).
	RemovePushSubscription(ctx context.Context, endpoint string) error
}

// VAPIDKeys is an application server's key pair (RFC 8292): Public is the
// uncompressed P-256 point (65 bytes) and Private the scalar (32 bytes),
// both base64url without padding — the forms browsers (applicationServerKey)
// and the webpush tools use.
type VAPIDKeys struct {
	Public  string `json:"public"`
	Private string `json:"private"`
}

// GenerateVAPIDKeys returns a new key pair.
func GenerateVAPIDKeys() (VAPIDKeys, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return VAPIDKeys{}, fmt.Errorf("notify: generate VAPID keys: %w", err)
	}
	pub, err := k.PublicKey.Bytes()
	if err != nil {
		return VAPIDKeys{}, fmt.Errorf("notify: generate VAPID keys: %w", err)
	}
	priv, err := k.Bytes()
	if err != nil {
		return VAPIDKeys{}, fmt.Errorf("notify: generate VAPID keys: %w", err)
	}
	return VAPIDKeys{Public: base64.RawURLEncoding.EncodeToString(pub), Private: base64.RawURLEncoding.EncodeToString(priv)}, nil
}

// parse checks that the pair is a P-256 key pair that belongs together.
func (k VAPIDKeys) parse() (*ecdsa.PrivateKey, []byte, error) {
	priv, err := pushsub.DecodeKey(k.Private)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: VAPID private key is not base64url: %v", ErrInvalid, err)
	}
	key, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), priv)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: VAPID private key: %v", ErrInvalid, err)
	}
	pub, err := pushsub.DecodeKey(k.Public)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: VAPID public key is not base64url: %v", ErrInvalid, err)
	}
	own, err := key.PublicKey.Bytes()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: VAPID private key: %v", ErrInvalid, err)
	}
	if !bytes.Equal(own, pub) {
		return nil, nil, fmt.Errorf("%w: the VAPID public key is not the private key's", ErrInvalid)
	}
	return key, pub, nil
}

// Validate reports whether k is a usable key pair.
func (k VAPIDKeys) Validate() error {
	_, _, err := k.parse()
	return err
}

// NormalizePushEndpoint is pushsub.Normalize, the error wrapping
// ErrInvalid: a push endpoint's one spelling.
func NormalizePushEndpoint(endpoint string) (string, error) {
	n, err := pushsub.Normalize(endpoint)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return n, nil
}

// ValidatePushSubscription checks a subscription as a browser sends it
// (pushsub.Validate: an https endpoint the dial guard would not refuse by
// its URL alone, a P-256 public key and a 16-byte auth secret); the error
// wraps ErrInvalid and the *pushsub.Error naming the field.
func ValidatePushSubscription(s PushSubscription, allowLoopback bool) error {
	if err := pushsub.Validate(s, allowLoopback); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// PushMessage is the JSON a push carries, decrypted by the browser and
// handed to the service worker's push event. Tag is the event id: shown as
// the notification's tag, a redelivery (at least once) replaces the
// notification instead of adding a second.
type PushMessage struct {
	Title    string           `json:"title"`
	Body     string           `json:"body"`
	Tag      string           `json:"tag"`
	URL      string           `json:"url"`
	Kind     envelope.SubType `json:"kind"`
	EventID  string           `json:"eventId"`
	FamilyID int64            `json:"familyId"`
	MemberID int64            `json:"memberId,omitempty"`
	Lang     Lang             `json:"lang"`
	// RequestID is the data request a DATA_REQUESTED is about: the family
	// app's service worker offers to approve or decline it from the
	// notification itself.
	RequestID int64 `json:"requestId,omitempty"`
	// RequestKind is that request's kind when it asks for time (TIME or
	// APP, with Minutes): approving it grants the minutes asked for, not
	// data. Absent for a request for data.
	RequestKind string `json:"requestKind,omitempty"`
	Minutes     int64  `json:"minutes,omitempty"`
	// TopUp says that the notification offers to top up (an owner's
	// THRESHOLD_ALERT): the family app's service worker adds a button that
	// opens its top-ups.
	TopUp bool `json:"topUp,omitempty"`
}

// Urgency is RFC 8030's Urgency header value.
type Urgency string

// The urgencies of RFC 8030 §5.3.
const (
	UrgencyVeryLow Urgency = "very-low"
	UrgencyLow     Urgency = "low"
	UrgencyNormal  Urgency = "normal"
	UrgencyHigh    Urgency = "high"
)

// WebPushOption configures a WebPush.
type WebPushOption func(*WebPush) error

// WithPushHTTPClient sets the HTTP client; it must keep endpoints out of
// the deployment's network itself. Default: a client that connects only
// where the dial guard allows (see PublicOnlyDialer), through no proxy, and
// follows no redirect: endpoints are URLs members registered, and must not
// reach the deployment's own network.
func WithPushHTTPClient(c *http.Client) WebPushOption {
	return func(w *WebPush) error {
		if c == nil {
			return fmt.Errorf("%w: nil http client", ErrInvalid)
		}
		w.client = c
		return nil
	}
}

// WithPushLoopback lets the default client (see WithPushHTTPClient) reach
// loopback addresses too, on any port: for tests with a local push service,
// never for a deployment. Every other address the guard refuses stays
// refused. Default: loopback refused.
func WithPushLoopback() WebPushOption {
	return func(w *WebPush) error {
		w.loopback = true
		return nil
	}
}

// WithPushTimeout bounds each push to one endpoint: connecting, the TLS
// handshake, the request and the push service's answer. An endpoint that
// takes longer fails the attempt (retried like a 5xx). It must be from
// 100 ms to 1 min. Default: DefaultPushTimeout (3 s).
func WithPushTimeout(d time.Duration) WebPushOption {
	return func(w *WebPush) error {
		if d < 100*time.Millisecond || d > time.Minute {
			return fmt.Errorf("%w: push timeout must be 100ms..1m", ErrInvalid)
		}
		w.timeout = d
		return nil
	}
}

// WithPushTTL sets how long a push service keeps a message for an offline
// browser (the TTL header, whole seconds). Default: 24 h.
func WithPushTTL(d time.Duration) WebPushOption {
	return func(w *WebPush) error {
		if d < 0 || d > 28*24*time.Hour {
			return fmt.Errorf("%w: push TTL must be 0..28 days", ErrInvalid)
		}
		w.ttl = d
		return nil
	}
}

// WithPushUrgency sets the Urgency of pushes of kind. Default: high for
// CUSTOMER_BLOCKED and the ask-for-more kinds, normal for any other.
func WithPushUrgency(kind envelope.SubType, u Urgency) WebPushOption {
	return func(w *WebPush) error {
		switch u {
		case UrgencyVeryLow, UrgencyLow, UrgencyNormal, UrgencyHigh:
		default:
			return fmt.Errorf("%w: urgency %q", ErrInvalid, u)
		}
		w.urgency[kind] = u
		return nil
	}
}

// WithPushLang sets the language of the pushed texts. Default: Korean.
func WithPushLang(l Lang) WebPushOption {
	return func(w *WebPush) error {
		if l != Korean && l != English {
			return fmt.Errorf("%w: language %q", ErrInvalid, l)
		}
		w.lang = l
		return nil
	}
}

// WithPushURL sets the page a click on the notification opens (a path of
// the app). Default: "/app/#inbox".
func WithPushURL(u string) WebPushOption {
	return func(w *WebPush) error {
		if u == "" {
			return fmt.Errorf("%w: empty push URL", ErrInvalid)
		}
		w.url = u
		return nil
	}
}

// WithPushClock sets the clock of the VAPID token's expiry. Default:
// time.Now.
func WithPushClock(now func() time.Time) WebPushOption {
	return func(w *WebPush) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalid)
		}
		w.now = now
		return nil
	}
}

// WithPushLogger sets the logger (removed subscriptions at DEBUG).
// Default: discard.
func WithPushLogger(l *slog.Logger) WebPushOption {
	return func(w *WebPush) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalid)
		}
		w.log = l
		return nil
	}
}

// WebPush is a Channel that sends each notification as a Web Push message
// (RFC 8030) to the push subscriptions of the members who see it,
// encrypted for each browser (RFC 8291, aes128gcm) and authenticated with
// the application server's VAPID key (RFC 8292).
//
// The subscriptions are pushed in parallel, each within the push timeout
// (WithPushTimeout, 3 s). A 2xx answer is success; 404 and 410 mean the
// subscription is gone: it is removed from the store and not retried. 408,
// 429, 5xx, transport errors and timeouts are retried (the notifier's
// schedule, then the dead-letter topic); Send then fails if any
// subscription failed so, and a retry sends to every subscription again —
// the message's Tag lets the browser replace rather than repeat. Other
// answers (400, 401/403 for a subscription made with another key, 413, a
// redirect) are permanent failures, as is an endpoint whose address is not
// public (ErrNotPublic) with the default client.
type WebPush struct {
	store    SubscriptionStore
	key      *ecdsa.PrivateKey
	pub      []byte
	subject  string
	client   *http.Client
	loopback bool
	timeout  time.Duration
	ttl      time.Duration
	urgency  map[envelope.SubType]Urgency
	lang     Lang
	url      string
	now      func() time.Time
	log      *slog.Logger
}

var _ Channel = (*WebPush)(nil)

// NewWebPush returns a web push channel reading subscriptions from store,
// signing with keys, whose VAPID subject (a contact for the push services'
// operators) is a mailto: or https: URI.
func NewWebPush(store SubscriptionStore, keys VAPIDKeys, subject string, opts ...WebPushOption) (*WebPush, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil subscription store", ErrInvalid)
	}
	key, pub, err := keys.parse()
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(subject, "mailto:") && !strings.HasPrefix(subject, "https://") || len(subject) < len("mailto:")+3 {
		return nil, fmt.Errorf("%w: VAPID subject must be a mailto: or https: URI, got %q", ErrInvalid, subject)
	}
	w := &WebPush{
		store: store, key: key, pub: pub, subject: subject,
		timeout: DefaultPushTimeout,
		ttl:     24 * time.Hour,
		urgency: map[envelope.SubType]Urgency{
			envelope.SubCustomerBlocked: UrgencyHigh, KindDataRequested: UrgencyHigh, KindDataRequestAnswered: UrgencyHigh,
		},
		lang: Korean,
		url:  "/app/#inbox",
		now:  time.Now,
		log:  slog.New(slog.DiscardHandler),
	}
	for _, o := range opts {
		if err := o(w); err != nil {
			return nil, err
		}
	}
	if w.client == nil {
		w.client = pushClient(w.loopback, w.timeout)
	}
	return w, nil
}

// PublicKey returns the application server key (base64url), what a
// browser's pushManager.subscribe takes as applicationServerKey.
func (w *WebPush) PublicKey() string { return base64.RawURLEncoding.EncodeToString(w.pub) }

// maxParallelPushes bounds the pushes of one notification in flight at
// once: enough for every subscription of a large family (10 per member,
// store-side), so one family's dead endpoints do not queue its good ones
// behind them; with the notifier's workers, it bounds the connections too.
const maxParallelPushes = 64

// Send implements Channel. The subscriptions are pushed in parallel
// (at most maxParallelPushes at once), each within the push timeout
// (WithPushTimeout).
func (w *WebPush) Send(ctx context.Context, n Notification) error {
	subs, err := w.store.PushRecipients(ctx, n.FamilyID, n.MemberID)
	if err != nil {
		return fmt.Errorf("notify: web push: subscriptions of family %d: %w", n.FamilyID, err)
	}
	// What only owners see goes to no member's browser (a request for more
	// data is about the member who asked; a weekly summary is the family's).
	if ownersOnly(n.Kind) {
		subs = slices.DeleteFunc(subs, func(s PushSubscription) bool { return s.Role == string(RoleMember) })
	}
	// A gift is two notifications, one for each member: each goes to that
	// member's browsers only (owners read both in the inbox, and every
	// screen follows the gift live), so nobody is pushed one gift twice.
	if n.Kind == envelope.SubDataGifted {
		subs = slices.DeleteFunc(subs, func(s PushSubscription) bool { return s.MemberID != n.MemberID })
	}
	if len(subs) == 0 {
		return nil
	}
	m := w.message(n)
	m.TopUp = n.Kind == envelope.SubThresholdAlert
	msg, err := json.Marshal(m)
	if err != nil {
		return Permanent(fmt.Errorf("notify: web push: encode: %w", err))
	}
	// Only owners can top up: members are told to ask one.
	forMember := msg
	if n.Kind == envelope.SubThresholdAlert {
		var p struct {
			ThresholdPercent int `json:"thresholdPercent"`
		}
		if json.Unmarshal(n.Payload, &p) == nil && p.ThresholdPercent > 0 {
			m.Body, m.TopUp = MemberThresholdText(p.ThresholdPercent, w.lang), false
			if forMember, err = json.Marshal(m); err != nil {
				return Permanent(fmt.Errorf("notify: web push: encode: %w", err))
			}
		}
	}
	errs := make([]error, len(subs))
	slots := make(chan struct{}, maxParallelPushes)
	var wg sync.WaitGroup
	for i, s := range subs {
		slots <- struct{}{}
		wg.Go(func() { // ends within the push timeout
			defer func() { <-slots }()
			pctx, cancel := context.WithTimeout(ctx, w.timeout)
			defer cancel()
			body := msg
			if s.Role == string(RoleMember) {
				body = forMember
			}
			errs[i] = w.push(pctx, s, body, n.Kind)
		})
	}
	wg.Wait()
	var retry, permanent []error
	for i, s := range subs {
		err := errs[i]
		switch {
		case err == nil:
		case errors.Is(err, errGone):
			if rerr := w.store.RemovePushSubscription(ctx, s.Endpoint); rerr != nil {
				retry = append(retry, fmt.Errorf("remove gone subscription: %w", rerr))
				continue
			}
			w.log.Debug("notify: web push subscription gone, removed", "member", s.MemberID, "err", err)
		case errors.Is(err, ErrPermanent):
			permanent = append(permanent, err)
		default:
			retry = append(retry, err)
		}
	}
	if len(retry) > 0 {
		return fmt.Errorf("notify: web push: %d of %d subscriptions failed: %w", len(retry)+len(permanent), len(subs), errors.Join(append(retry, permanent...)...))
	}
	if len(permanent) > 0 {
		return Permanent(fmt.Errorf("notify: web push: %d of %d subscriptions refused: %w", len(permanent), len(subs), errors.Join(permanent...)))
	}
	return nil
}

func (w *WebPush) message(n Notification) PushMessage {
	title, body := n.Title, n.Body
	if l, err := n.Localized(w.lang); err == nil { // kinds notify cannot render keep the notifier's texts
		title, body = l.Title, l.Body
	}
	m := PushMessage{Title: title, Body: body, Tag: n.EventID, URL: w.url, Kind: n.Kind, EventID: n.EventID,
		FamilyID: n.FamilyID, MemberID: n.MemberID, Lang: w.lang}
	if n.Kind == envelope.SubDataRequested {
		var p struct {
			RequestID int64  `json:"requestId"`
			Kind      string `json:"kind"`
			Minutes   int64  `json:"minutes"`
		}
		if json.Unmarshal(n.Payload, &p) == nil && p.RequestID > 0 {
			m.RequestID = p.RequestID
			if p.Kind == envelope.KindTime || p.Kind == envelope.KindApp {
				m.RequestKind, m.Minutes = p.Kind, p.Minutes
			}
		}
	}
	return m
}

// errGone marks a push service's 404 or 410: the subscription expired or
// was unsubscribed.
var errGone = errors.New("push subscription gone")

func (w *WebPush) push(ctx context.Context, s PushSubscription, msg []byte, kind envelope.SubType) error {
	body, err := encryptPush(s, msg)
	if err != nil {
		return Permanent(err)
	}
	auth, err := w.vapid(s.Endpoint)
	if err != nil {
		return Permanent(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.Endpoint, bytes.NewReader(body))
	if err != nil {
		return Permanent(err)
	}
	urgency := w.urgency[kind]
	if urgency == "" {
		urgency = UrgencyNormal
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Content-Encoding", "aes128gcm")
	req.Header.Set("TTL", strconv.FormatInt(int64(w.ttl/time.Second), 10))
	req.Header.Set("Urgency", string(urgency))
	req.Header.Set("Authorization", auth)
	resp, err := w.client.Do(req)
	if errors.Is(err, ErrNotPublic) {
		return Permanent(err)
	}
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return nil
	case c == http.StatusNotFound || c == http.StatusGone:
		return fmt.Errorf("%w: %s", errGone, resp.Status)
	case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500:
		return fmt.Errorf("push service: %s", resp.Status)
	default:
		return Permanent(fmt.Errorf("push service: %s", resp.Status))
	}
}

// vapid returns the Authorization header of RFC 8292 §3 for endpoint: a
// JWT (ES256) for the endpoint's origin, valid 12 hours, and the public key.
func (w *WebPush) vapid(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("push endpoint: %w", err)
	}
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"typ":"JWT","alg":"ES256"}`))
	claims, err := json.Marshal(struct {
		Aud string `json:"aud"`
		Exp int64  `json:"exp"`
		Sub string `json:"sub"`
	}{u.Scheme + "://" + u.Host, w.now().Add(12 * time.Hour).Unix(), w.subject})
	if err != nil {
		return "", err
	}
	signing := header + "." + base64.RawURLEncoding.EncodeToString(claims)
	digest := sha256.Sum256([]byte(signing))
	r, s, err := ecdsa.Sign(rand.Reader, w.key, digest[:])
	if err != nil {
		return "", fmt.Errorf("vapid sign: %w", err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return "vapid t=" + signing + "." + base64.RawURLEncoding.EncodeToString(sig) + ", k=" + base64.RawURLEncoding.EncodeToString(w.pub), nil
}

// pushRecordSize is the record size written in the aes128gcm header; a
// message is one record, so it only bounds the message (RFC 8291 §4: push
// services accept at least 4096 bytes of body).
const pushRecordSize = 4096

// encryptPush encrypts msg for s as RFC 8291 §3-4 say: an ephemeral ECDH
// key pair, the auth secret and a random salt give the content key and
// nonce; the body is the aes128gcm header (salt, record size, the
// ephemeral public key) and one record, msg + the 0x02 delimiter,
// unpadded (every byte counts on a metered phone).
func encryptPush(s PushSubscription, msg []byte) ([]byte, error) {
	uaRaw, err := pushsub.DecodeKey(s.P256dh)
	if err != nil {
		return nil, fmt.Errorf("push subscription p256dh: %w", err)
	}
	ua, err := ecdh.P256().NewPublicKey(uaRaw)
	if err != nil {
		return nil, fmt.Errorf("push subscription p256dh: %w", err)
	}
	authSecret, err := pushsub.DecodeKey(s.Auth)
	if err != nil {
		return nil, fmt.Errorf("push subscription auth: %w", err)
	}
	as, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	asPub := as.PublicKey().Bytes()
	shared, err := as.ECDH(ua)
	if err != nil {
		return nil, fmt.Errorf("push ecdh: %w", err)
	}
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return nil, err
	}
	cek, nonce, err := pushContentKeys(shared, authSecret, salt, uaRaw, asPub)
	if err != nil {
		return nil, err
	}
	if len(msg)+1+16 > pushRecordSize-(16+4+1+len(asPub)) {
		return nil, fmt.Errorf("push message of %d bytes too large", len(msg))
	}
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 16+4+1+len(asPub)+len(msg)+1+gcm.Overhead())
	out = append(out, salt...)
	out = binary.BigEndian.AppendUint32(out, pushRecordSize)
	out = append(out, byte(len(asPub)))
	out = append(out, asPub...)
	plain := append(append(make([]byte, 0, len(msg)+1), msg...), 0x02) // last record: delimiter 2, no padding
	return gcm.Seal(out, nonce, plain, nil), nil
}

// pushContentKeys derives the content encryption key (16 bytes) and nonce
// (12 bytes) of RFC 8291 §3.3-3.4 from the ECDH secret, the subscription's
// auth secret, the record's salt and both public keys (uncompressed).
func pushContentKeys(ecdhSecret, authSecret, salt, uaPublic, asPublic []byte) (cek, nonce []byte, err error) {
	info := "WebPush: info\x00" + string(uaPublic) + string(asPublic)
	ikm, err := hkdf.Key(sha256.New, ecdhSecret, authSecret, info, 32)
	if err != nil {
		return nil, nil, err
	}
	prk, err := hkdf.Extract(sha256.New, ikm, salt)
	if err != nil {
		return nil, nil, err
	}
	if cek, err = hkdf.Expand(sha256.New, prk, "Content-Encoding: aes128gcm\x00", 16); err != nil {
		return nil, nil, err
	}
	if nonce, err = hkdf.Expand(sha256.New, prk, "Content-Encoding: nonce\x00", 12); err != nil {
		return nil, nil, err
	}
	return cek, nonce, nil
}
