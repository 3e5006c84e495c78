package notify

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestWebhook(t *testing.T) {
	secret := []byte("0123456789abcdef")
	status := http.StatusNoContent
	var gotSig, gotID string
	var gotBody []byte
	var gotTS int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotBody, _ = io.ReadAll(r.Body)
		gotSig, gotID = r.Header.Get(HeaderSignature), r.Header.Get(HeaderEventID)
		gotTS, _ = strconv.ParseInt(r.Header.Get(HeaderTimestamp), 10, 64)
		w.WriteHeader(status)
	}))
	defer srv.Close()
	wh, err := NewWebhook(srv.URL+"/push", secret, WithHTTPClient(srv.Client()), WithWebhookClock(func() time.Time { return t0 }))
	if err != nil {
		t.Fatal(err)
	}
	n := Notification{ID: 1, EventID: "ntf_1", FamilyID: 100, Kind: "THRESHOLD_ALERT", Payload: []byte(`{}`), CreatedAt: t0}
	if err := wh.Send(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	if gotTS != t0.Unix() || gotID != "ntf_1" || !Verify(secret, gotTS, gotBody, gotSig) || Verify([]byte("another secret!!"), gotTS, gotBody, gotSig) {
		t.Errorf("signature %q ts %d id %q", gotSig, gotTS, gotID)
	}
	for code, perm := range map[int]bool{500: false, 503: false, 429: false, 408: false, 400: true, 404: true, 410: true} {
		status = code
		err := wh.Send(context.Background(), n)
		if err == nil || errors.Is(err, ErrPermanent) != perm {
			t.Errorf("status %d: %v (permanent %v)", code, err, perm)
		}
	}
	srv.Close()
	if err := wh.Send(context.Background(), n); err == nil || errors.Is(err, ErrPermanent) {
		t.Errorf("server gone: %v", err)
	}
	if err := wh.Send(context.Background(), Notification{Payload: []byte("{")}); !errors.Is(err, ErrPermanent) {
		t.Errorf("unencodable: %v", err)
	}
}

func TestWebhookOptions(t *testing.T) {
	secret := []byte("0123456789abcdef")
	for _, c := range []struct {
		url    string
		secret []byte
		opts   []WebhookOption
	}{
		{"ftp://x/", secret, nil},
		{"http://", secret, nil},
		{"http://x/", []byte("short"), nil},
		{"http://x/", secret, []WebhookOption{WithHTTPClient(nil)}},
		{"http://x/", secret, []WebhookOption{WithWebhookClock(nil)}},
	} {
		if _, err := NewWebhook(c.url, c.secret, c.opts...); !errors.Is(err, ErrInvalid) {
			t.Errorf("NewWebhook(%q): %v", c.url, err)
		}
	}
	if Permanent(nil) != nil {
		t.Error("Permanent(nil)")
	}
	if err := Permanent(io.EOF); !errors.Is(err, ErrPermanent) || !errors.Is(err, io.EOF) || err.Error() != "EOF" {
		t.Errorf("Permanent: %v", err)
	}
}

// VerifyRequest accepts what Webhook sent within the tolerance and rejects,
// with an error saying why, a replay (too old), a clock far ahead (too new),
// a tampered body, another secret and missing or malformed headers.
func TestVerifyRequest(t *testing.T) {
	secret := []byte("0123456789abcdef")
	body := []byte(`{"eventId":"ntf_1"}`)
	signed := func(ts int64, b []byte) http.Header {
		h := http.Header{}
		h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
		h.Set(HeaderSignature, Sign(secret, ts, b))
		return h
	}
	sent := t0.Unix()
	for _, c := range []struct {
		name      string
		h         http.Header
		body      []byte
		secret    []byte
		now       time.Time
		tolerance time.Duration
		want      error
	}{
		{"fresh", signed(sent, body), body, secret, t0.Add(2 * time.Second), 0, nil},
		{"at the default tolerance", signed(sent, body), body, secret, t0.Add(DefaultTolerance), 0, nil},
		{"receiver clock behind, within tolerance", signed(sent, body), body, secret, t0.Add(-DefaultTolerance), 0, nil},
		{"replayed after the default tolerance", signed(sent, body), body, secret, t0.Add(DefaultTolerance + time.Second), 0, ErrTimestampTooOld},
		{"replayed an hour later", signed(sent, body), body, secret, t0.Add(time.Hour), 0, ErrTimestampTooOld},
		{"old for a tighter tolerance", signed(sent, body), body, secret, t0.Add(31 * time.Second), 30 * time.Second, ErrTimestampTooOld},
		{"from the future beyond tolerance", signed(sent, body), body, secret, t0.Add(-DefaultTolerance - time.Second), 0, ErrTimestampTooNew},
		{"tampered body", signed(sent, body), []byte(`{"eventId":"ntf_2"}`), secret, t0, 0, ErrSignatureMismatch},
		{"another secret", signed(sent, body), body, []byte("another secret!!"), t0, 0, ErrSignatureMismatch},
		{"timestamp changed after signing", func() http.Header {
			h := signed(sent, body)
			h.Set(HeaderTimestamp, strconv.FormatInt(sent+1, 10))
			return h
		}(), body, secret, t0, 0, ErrSignatureMismatch},
		{"no signature", http.Header{HeaderTimestamp: {strconv.FormatInt(sent, 10)}}, body, secret, t0, 0, ErrSignatureMissing},
		{"no timestamp", http.Header{HeaderSignature: {Sign(secret, sent, body)}}, body, secret, t0, 0, ErrSignatureMissing},
		{"timestamp not a number", func() http.Header {
			h := signed(sent, body)
			h.Set(HeaderTimestamp, "yesterday")
			return h
		}(), body, secret, t0, 0, ErrSignatureMissing},
		{"signature without its scheme", func() http.Header {
			h := signed(sent, body)
			h.Set(HeaderSignature, strings.TrimPrefix(h.Get(HeaderSignature), "sha256="))
			return h
		}(), body, secret, t0, 0, ErrSignatureMismatch},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := VerifyRequest(c.secret, c.h, c.body, c.now, c.tolerance)
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("VerifyRequest = %v, want %v", err, c.want)
			}
			if err != nil && !errors.Is(err, ErrUnverified) {
				t.Errorf("%v is not ErrUnverified", err)
			}
		})
	}
}

// What Webhook.Send posts passes VerifyRequest at the receiver.
func TestWebhookVerifiedByReceiver(t *testing.T) {
	secret := []byte("0123456789abcdef")
	errs := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		errs <- VerifyRequest(secret, r.Header, body, t0.Add(time.Second), 0)
	}))
	defer srv.Close()
	wh, err := NewWebhook(srv.URL, secret, WithHTTPClient(srv.Client()), WithWebhookClock(func() time.Time { return t0 }))
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Send(context.Background(), Notification{ID: 1, EventID: "ntf_1", FamilyID: 100, Kind: "THRESHOLD_ALERT", Payload: []byte(`{}`), CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Errorf("receiver: %v", err)
	}
}

// The webhook's own URL is the operator's choice and may be inside the
// network (here loopback), but a redirect from it is followed only where the
// dial guard allows: not to another internal address. A redirect to the
// configured origin itself is followed.
func TestWebhookRedirectsGuarded(t *testing.T) {
	secret := []byte("0123456789abcdef")
	var inside atomic.Int32
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer internal.Close()
	var received atomic.Int32
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, internal.URL+"/metadata", http.StatusTemporaryRedirect)
		case "/moved":
			http.Redirect(w, r, "/hook", http.StatusPermanentRedirect)
		default:
			if err := VerifyRequest(secret, r.Header, mustRead(t, r), time.Now(), 0); err != nil {
				t.Errorf("the redirected request: %v", err)
			}
			received.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer receiver.Close()
	n := Notification{ID: 1, EventID: "ntf_1", FamilyID: 100, Kind: "THRESHOLD_ALERT", Payload: []byte(`{}`), CreatedAt: t0}

	away, err := NewWebhook(receiver.URL+"/away", secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := away.Send(context.Background(), n); !errors.Is(err, ErrNotPublic) || !errors.Is(err, ErrPermanent) {
		t.Errorf("redirect to another internal address: %v, want ErrNotPublic, permanent", err)
	}
	if inside.Load() != 0 {
		t.Errorf("the internal address got %d requests", inside.Load())
	}

	moved, err := NewWebhook(receiver.URL+"/moved", secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := moved.Send(context.Background(), n); err != nil || received.Load() != 1 {
		t.Errorf("redirect within the configured origin: %v, %d received", err, received.Load())
	}
}

func mustRead(t *testing.T, r *http.Request) []byte {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Error(err)
	}
	return b
}
