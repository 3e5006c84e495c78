package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Channel delivers notifications outside the process (web push, a webhook).
// Send returns nil once the notification was accepted; an error is retried
// on the notifier's schedule unless it wraps ErrPermanent (see Permanent).
// Send must honour ctx. A channel may see the same notification again after
// a crash (at least once); Notification.EventID identifies it.
type Channel interface {
	Send(ctx context.Context, n Notification) error
}

// ChannelFunc adapts a function to Channel.
type ChannelFunc func(ctx context.Context, n Notification) error

// Send calls f.
func (f ChannelFunc) Send(ctx context.Context, n Notification) error { return f(ctx, n) }

// Permanent marks err as one retrying cannot fix: the delivery is
// dead-lettered at once.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

type permanentError struct{ err error }

func (e permanentError) Error() string        { return e.err.Error() }
func (e permanentError) Unwrap() error        { return e.err }
func (e permanentError) Is(target error) bool { return target == ErrPermanent }

// Webhook headers.
const (
	HeaderSignature = "X-DPCS-Signature" // "sha256=" + hex HMAC-SHA256 of timestamp + "." + body
	HeaderTimestamp = "X-DPCS-Timestamp" // Unix seconds, part of the signed text
	HeaderEventID   = "X-DPCS-Event-Id"  // the notification's event id, for receiver-side dedupe
)

// Sign returns the HeaderSignature value of body sent at ts (Unix seconds).
func Sign(secret []byte, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(strconv.AppendInt(nil, ts, 10))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify reports whether sig is the signature of body sent at ts, in
// constant time. It checks the signature only: a receiver must also reject
// old timestamps, or a captured request can be replayed for ever.
// VerifyRequest does both and says why it refused.
func Verify(secret []byte, ts int64, body []byte, sig string) bool {
	return hmac.Equal([]byte(Sign(secret, ts, body)), []byte(sig))
}

// DefaultTolerance is how far a webhook's HeaderTimestamp may be from the
// receiver's clock, either way, for VerifyRequest with no tolerance given:
// five minutes, as Stripe and Svix use.
const DefaultTolerance = 5 * time.Minute

// Errors of VerifyRequest. Each is also ErrUnverified: a receiver answers
// any of them with 400 (or 401) and does not act on the request.
var (
	ErrUnverified = errors.New("notify: webhook request not verified")
	// ErrSignatureMissing: HeaderSignature or HeaderTimestamp is missing, or
	// the timestamp is not Unix seconds.
	ErrSignatureMissing = fmt.Errorf("%w: signature headers missing or malformed", ErrUnverified)
	// ErrSignatureMismatch: the signature is not the body's and timestamp's
	// under this secret (tampered, or signed with another secret).
	ErrSignatureMismatch = fmt.Errorf("%w: signature mismatch", ErrUnverified)
	// ErrTimestampTooOld: signed longer ago than the tolerance (a replay, or
	// a delivery delayed past it).
	ErrTimestampTooOld = fmt.Errorf("%w: timestamp too old", ErrUnverified)
	// ErrTimestampTooNew: signed further in the future than the tolerance
	// (a clock far off, or a forged timestamp).
	ErrTimestampTooNew = fmt.Errorf("%w: timestamp too new", ErrUnverified)
)

// VerifyRequest checks a received webhook request: the headers h (its
// HeaderTimestamp and HeaderSignature) and the raw body, exactly as read,
// against secret, at the receiver's time now. The signature must match and
// the timestamp must be within tolerance of now either way (tolerance ≤ 0:
// DefaultTolerance), so a captured request cannot be replayed later. It
// returns nil, or an error that is one of ErrSignatureMissing,
// ErrSignatureMismatch, ErrTimestampTooOld or ErrTimestampTooNew (all
// ErrUnverified). The signature is compared in constant time and checked
// before the timestamp, so an unsigned request learns nothing about clocks.
//
// Within the tolerance a replay still passes: receivers that must act once
// dedupe on HeaderEventID (a notification may also be redelivered after a
// crash, with a fresh timestamp and the same event id).
func VerifyRequest(secret []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	sig, rawTS := h.Get(HeaderSignature), h.Get(HeaderTimestamp)
	if sig == "" || rawTS == "" {
		return ErrSignatureMissing
	}
	ts, err := strconv.ParseInt(rawTS, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not Unix seconds", ErrSignatureMissing, HeaderTimestamp, rawTS)
	}
	if !Verify(secret, ts, body, sig) {
		return ErrSignatureMismatch
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	sent := time.Unix(ts, 0)
	switch age := now.Sub(sent); {
	case age > tolerance:
		return fmt.Errorf("%w: signed %s ago, tolerance %s", ErrTimestampTooOld, age.Round(time.Second), tolerance)
	case -age > tolerance:
		return fmt.Errorf("%w: signed %s ahead of the receiver's clock, tolerance %s", ErrTimestampTooNew, (-age).Round(time.Second), tolerance)
	}
	return nil
}

// WebhookOption configures a Webhook.
type WebhookOption func(*Webhook) error

// WithHTTPClient sets the HTTP client. Default: a client with a 10 s
// timeout, through no proxy, that dials the webhook URL's host and port as
// configured (a receiver inside the network is the operator's choice) and
// every other place a redirect leads to only where the dial guard allows
// (see PublicOnlyDialer): a receiver cannot redirect the notifier into the
// deployment's network.
func WithHTTPClient(c *http.Client) WebhookOption {
	return func(w *Webhook) error {
		if c == nil {
			return fmt.Errorf("%w: nil http client", ErrInvalid)
		}
		w.client = c
		return nil
	}
}

// WithWebhookClock sets the clock of the signed timestamp. Default: time.Now.
func WithWebhookClock(now func() time.Time) WebhookOption {
	return func(w *Webhook) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalid)
		}
		w.now = now
		return nil
	}
}

// Webhook is a Channel that POSTs each notification as JSON to a URL,
// signed with HMAC-SHA256 (HeaderSignature over HeaderTimestamp + "." +
// body). A 2xx answer is success; 408, 429 and 5xx are retried; other
// answers, and a redirect the dial guard refuses (ErrNotPublic), are
// permanent failures.
type Webhook struct {
	url    string
	secret []byte
	client *http.Client
	now    func() time.Time
}

var _ Channel = (*Webhook)(nil)

// NewWebhook returns a webhook channel posting to rawURL (http or https)
// signed with secret (at least 16 bytes).
func NewWebhook(rawURL string, secret []byte, opts ...WebhookOption) (*Webhook, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: webhook URL must be http(s)://host/…, got %q", ErrInvalid, rawURL)
	}
	if len(secret) < 16 {
		return nil, fmt.Errorf("%w: webhook secret must be at least 16 bytes", ErrInvalid)
	}
	w := &Webhook{url: rawURL, secret: bytes.Clone(secret), client: webhookClient(u), now: time.Now}
	for _, o := range opts {
		if err := o(w); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Send implements Channel.
func (w *Webhook) Send(ctx context.Context, n Notification) error {
	body, err := json.Marshal(n)
	if err != nil {
		return Permanent(fmt.Errorf("notify: webhook: encode: %w", err))
	}
	ts := w.now().Unix()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return Permanent(fmt.Errorf("notify: webhook: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, Sign(w.secret, ts, body))
	req.Header.Set(HeaderEventID, n.EventID)
	resp, err := w.client.Do(req)
	if errors.Is(err, ErrNotPublic) {
		return Permanent(fmt.Errorf("notify: webhook: %w", err))
	}
	if err != nil {
		return fmt.Errorf("notify: webhook: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return nil
	case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500:
		return fmt.Errorf("notify: webhook: %s", resp.Status)
	default:
		return Permanent(fmt.Errorf("notify: webhook: %s", resp.Status))
	}
}
