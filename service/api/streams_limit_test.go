package api

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// streamRefusal opens a stream expecting a refusal: an RFC 9457 problem of
// status want whose detail holds says.
func (f *apiFixture) streamRefusal(t *testing.T, token string, want int, says string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+streamPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("stream over a limit: opened; want %d saying %q", want, says)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") ||
		!strings.Contains(string(data), says) {
		t.Fatalf("stream over a limit: %d %s %s; want %d saying %q", resp.StatusCode, resp.Header.Get("Content-Type"), data, want, says)
	}
	return resp
}

// waitStreams waits until the instance holds n streams (a closed stream's
// handler ends when the server notices the connection is gone).
func (f *apiFixture) waitStreams(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); f.api.streams.count() != n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d streams open, want %d", f.api.streams.count(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestStreamLimitPerSession: one session opens at most
// DefaultStreamsPerSession streams; one more is 429 saying why, and a
// closed stream makes room.
func TestStreamLimitPerSession(t *testing.T) {
	f := newAPIFixture(t, withPing(time.Hour))
	tok := f.token(childA)
	var open []*sseStream
	for range DefaultStreamsPerSession {
		open = append(open, f.openStream(streamPath, tok, ""))
	}
	defer func() {
		for _, s := range open {
			s.close()
		}
	}()
	resp := f.streamRefusal(t, tok, http.StatusTooManyRequests, fmt.Sprintf("%d live streams", DefaultStreamsPerSession))
	if resp.Header.Get("Retry-After") != "" {
		t.Errorf("Retry-After %q on a count, not a rate", resp.Header.Get("Retry-After"))
	}
	f.alive(t, "a stream within the limit", open[0])
	open[0].close()
	f.waitStreams(t, DefaultStreamsPerSession-1)
	open[0] = f.openStream(streamPath, tok, "")
}

// TestStreamLimitPerMember: a member's sessions together open at most
// PerMember streams; another member is not held back.
func TestStreamLimitPerMember(t *testing.T) {
	f := newAPIFixture(t, withPing(time.Hour), func(c *Config) { c.Streams = StreamLimits{PerSession: 2, PerMember: 3} })
	s1, s2 := f.login(childA).AccessToken, f.login(childA).AccessToken
	defer f.openStream(streamPath, s1, "").close()
	defer f.openStream(streamPath, s1, "").close()
	f.streamRefusal(t, s1, http.StatusTooManyRequests, "session has 2 live streams")
	defer f.openStream(streamPath, s2, "").close()
	f.streamRefusal(t, s2, http.StatusTooManyRequests, "member has 3 live streams")
	defer f.openStream(streamPath, f.token(ownerA), "").close()
}

// TestStreamLimitTotal: the instance holds at most Total streams; one more
// is 503 with Retry-After, whoever asks.
func TestStreamLimitTotal(t *testing.T) {
	f := newAPIFixture(t, withPing(time.Hour), func(c *Config) { c.Streams = StreamLimits{Total: 2} })
	defer f.openStream(streamPath, f.token(ownerA), "").close()
	defer f.openStream(streamPath, f.token(childA), "").close()
	resp := f.streamRefusal(t, f.token(victimA), http.StatusServiceUnavailable, "2 live streams")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
}

// TestStreamLimitReleased: a stream refused after its slot was taken —
// another family's (404), a bad Last-Event-ID (422) — gives the slot back.
func TestStreamLimitReleased(t *testing.T) {
	f := newAPIFixture(t, withPing(time.Hour), func(c *Config) { c.Streams = StreamLimits{PerSession: 1} })
	tok := f.token(childA)
	for range 3 {
		f.problem(http.MethodGet, "/families/200/notifications/stream", tok, nil, http.StatusNotFound, "")
		resp, data := f.do(http.MethodGet, streamPath, tok, nil, "Last-Event-ID", "-1")
		if resp.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("Last-Event-ID -1: %d %s", resp.StatusCode, data)
		}
	}
	if n := f.api.streams.count(); n != 0 {
		t.Fatalf("%d streams held after refusals", n)
	}
	defer f.openStream(streamPath, tok, "").close()
}
