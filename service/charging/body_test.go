package charging_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dabom/dpcs/service/charging"
)

// TestBodyBounds: a body is read whole whatever its Content-Length says
// (or without one), and one larger than MaxRequestBytes is refused with
// 413 either way.
func TestBodyBounds(t *testing.T) {
	e := newEnv(t)
	ref, _, err := e.svc.Create(e.ctx, request("imsi-"+childIMSI, 0, ask(10, 1*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	h := charging.Handler(e.svc, charging.HandlerConfig{Tokens: []string{token}})
	post := func(body []byte, length int64) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, charging.BasePath+"/chargingdata/"+ref+"/update", io.MultiReader(bytes.NewReader(body)))
		req.ContentLength = length
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	for i, length := range []int64{0, -1, 10} {
		update := smfUpdateBody(uint32(i+1), 1024, mib)
		if length == 0 {
			length = int64(len(update))
		}
		if w := post(update, length); w.Code != http.StatusOK {
			t.Errorf("Content-Length %d: %d %s", length, w.Code, w.Body)
		}
	}
	big := []byte(`{"x":"` + strings.Repeat("a", charging.MaxRequestBytes) + `"}`)
	for _, length := range []int64{int64(len(big)), -1} {
		if w := post(big, length); w.Code != http.StatusRequestEntityTooLarge {
			t.Errorf("a body of %d bytes, Content-Length %d: %d %s", len(big), length, w.Code, w.Body)
		}
	}
}

// TestClientGoneIsNotAnError: a step the SMF stopped waiting for (its
// request's context cancelled) is not logged as a failure of the charging
// function: under load every client that times out or hangs up left an
// ERROR "SYSTEM_FAILURE" line. A failure with the caller still there is.
func TestClientGoneIsNotAnError(t *testing.T) {
	e := newEnv(t)
	ref, _, err := e.svc.Create(e.ctx, request("imsi-"+childIMSI, 0, ask(10, 1*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := charging.Handler(e.svc, charging.HandlerConfig{Tokens: []string{token}, Logger: log})
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, charging.BasePath+"/chargingdata/"+ref+"/update",
		bytes.NewReader(smfUpdateBody(1, 1024, mib)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code == http.StatusOK {
		t.Fatalf("a cancelled update was answered 200: %s", w.Body)
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("a client that went away was logged as an error:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "the client went away before the answer") {
		t.Errorf("a client that went away was not logged at all:\n%s", logs.String())
	}
	// With the caller still there, a store failure is an error.
	logs.Reset()
	if err := e.st.DB.Close(); err != nil {
		t.Fatal(err)
	}
	req = httptest.NewRequestWithContext(e.ctx, http.MethodPost, charging.BasePath+"/chargingdata/"+ref+"/update",
		bytes.NewReader(smfUpdateBody(1, 1024, mib)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusInternalServerError || !strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("a store failure: %d, logged:\n%s", w.Code, logs.String())
	}
}
