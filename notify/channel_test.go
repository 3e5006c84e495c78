package notify

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
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
