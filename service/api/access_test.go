package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/notify"
)

// recorder collects the AccessEvents a subscriber got.
type recorder struct {
	mu     sync.Mutex
	got    []AccessEvent
	signal chan struct{}
}

func newRecorder() *recorder { return &recorder{signal: make(chan struct{}, 1)} }

func (r *recorder) add(e AccessEvent) {
	r.mu.Lock()
	r.got = append(r.got, e)
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

func (r *recorder) events() []AccessEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]AccessEvent(nil), r.got...)
}

// wait returns the events once there are n, failing after d with those seen.
func (r *recorder) wait(t *testing.T, what string, n int, d time.Duration) []AccessEvent {
	t.Helper()
	timeout := time.After(d)
	for {
		if got := r.events(); len(got) >= n {
			return got
		}
		select {
		case <-r.signal:
		case <-timeout:
			t.Fatalf("%s: %d events after %v, want %d: %+v", what, len(r.events()), d, n, r.events())
		}
	}
}

func newRedisBus(t *testing.T, rdb redis.UniversalClient) *RedisAccessEvents {
	t.Helper()
	b, err := NewRedisAccessEvents(context.Background(), rdb, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// accessEventsSuite is what every AccessEvents shared by two instances
// (a and b) must do.
func accessEventsSuite(t *testing.T, a, b AccessEvents) {
	ctx := context.Background()
	ra, rb := newRecorder(), newRecorder()
	unsubA := a.Subscribe(ra.add)
	b.Subscribe(rb.add)
	sent := []AccessEvent{{Member: 7}, {Member: 8, Session: "abc"}}
	for _, e := range sent {
		if err := a.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	// The publisher's own subscribers have it when Publish returns, once.
	if diff := cmp.Diff(sent, ra.events()); diff != "" {
		t.Errorf("publishing instance's events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sent, rb.wait(t, "other instance", len(sent), 5*time.Second)); diff != "" {
		t.Errorf("other instance's events (-want +got):\n%s", diff)
	}
	unsubA()
	if err := b.Publish(ctx, AccessEvent{Member: 9}); err != nil {
		t.Fatal(err)
	}
	rb.wait(t, "other instance, own event", len(sent)+1, 5*time.Second)
	if got := ra.events(); len(got) != len(sent) {
		t.Errorf("unsubscribed subscriber got %+v", got)
	}
}

func TestLocalAccessEvents(t *testing.T) {
	l := NewLocalAccessEvents()
	accessEventsSuite(t, l, l)
}

func TestRedisAccessEvents(t *testing.T) {
	f := newAPIFixture(t)
	other := redis.NewClient(&redis.Options{Addr: f.mr.Addr()})
	t.Cleanup(func() { other.Close() })
	a, b := newRedisBus(t, f.rdb), newRedisBus(t, other)
	accessEventsSuite(t, a, b)

	// A junk message on the channel is skipped.
	rb := newRecorder()
	b.Subscribe(rb.add)
	f.mr.Publish(DefaultAccessChannel, "not json")
	if err := a.Publish(context.Background(), AccessEvent{Member: 10}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]AccessEvent{{Member: 10}}, rb.wait(t, "after junk", 1, 5*time.Second)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// Redis restarting (messages published meanwhile are lost): once b is
	// subscribed again, its subscribers are told to re-check every stream.
	f.mr.Close()
	if err := a.Publish(context.Background(), AccessEvent{Member: 11}); err == nil {
		t.Error("Publish with Redis down reported no error")
	}
	if err := f.mr.Restart(); err != nil {
		t.Fatal(err)
	}
	got := rb.wait(t, "after a Redis restart", 2, 20*time.Second) // health check every 3 s
	if diff := cmp.Diff(AccessEvent{All: true}, got[1]); diff != "" {
		t.Errorf("event after re-subscription (-want +got):\n%s", diff)
	}

	// Close ends the subscription; it is idempotent.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRedisAccessEvents(context.Background(), nil, "", nil); err == nil {
		t.Error("NewRedisAccessEvents accepted a nil client")
	}
}

// instance serves a second API on f's store, engine and inbox with its own
// hub, as another API process would.
func (f *apiFixture) instance(t *testing.T, opts ...func(*Config)) (*httptest.Server, *notify.Hub) {
	t.Helper()
	hub, err := notify.NewHub()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hub.Close(context.Background()) })
	cfg := Config{Store: f.store, State: f.qs, Hub: hub, Inbox: f.inbox,
		Secret: []byte("0123456789abcdef0123456789abcdef"), Clock: f.clock}
	for _, o := range opts {
		o(&cfg)
	}
	f.complete(&cfg)
	api, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	return srv, hub
}

// TestStreamsEndAcrossInstances: two API instances sharing one Redis; the
// change is made through one, the streams it ends were opened on the other.
func TestStreamsEndAcrossInstances(t *testing.T) {
	mr := miniredis.RunT(t)
	bus := func(c *Config) {
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { rdb.Close() })
		c.AccessEvents = newRedisBus(t, rdb)
	}
	f := newAPIFixture(t, withPing(time.Hour), bus)
	srv, _ := f.instance(t, withPing(time.Hour), bus)

	victim := f.openStreamAt(srv, streamPath, f.token(victimA), "")
	defer victim.close()
	session := f.login(childA)
	out := f.openStreamAt(srv, streamPath, session.AccessToken, "")
	defer out.close()
	owner := f.openStreamAt(srv, streamPath, f.token(ownerA), "")
	defer owner.close()

	f.call(http.MethodDelete, "/families/100/members/1003", f.token(ownerA), nil, http.StatusNoContent, nil)
	victim.ended(t, "removed member's stream on the other instance", streamDeadline)
	f.call(http.MethodPost, "/auth/logout", "", map[string]string{"refreshToken": session.RefreshToken}, http.StatusNoContent, nil)
	out.ended(t, "logged-out session's stream on the other instance", streamDeadline)
	f.call(http.MethodPut, "/families/100/members/1002/role", f.token(ownerA), map[string]string{"role": "OWNER"}, http.StatusOK, nil)
	f.call(http.MethodPut, "/families/100/members/1001/role", f.token(childA), map[string]string{"role": "MEMBER"}, http.StatusOK, nil)
	owner.ended(t, "demoted owner's stream on the other instance", streamDeadline)
}

// TestAccessTokenSession: an access token names its session; one without a
// session, or of an ended session, is refused; IssueTokens starts a session.
func TestAccessTokenSession(t *testing.T) {
	f := newAPIFixture(t)
	tok := f.login(childA)
	var c accessClaims
	if _, _, err := jwt.NewParser().ParseUnverified(tok.AccessToken, &c); err != nil || len(c.Sid) != 32 {
		t.Fatalf("claims %+v, %v: want a 32-hex sid", c, err)
	}
	// Signed with the right secret but without a session: refused.
	c.Sid = ""
	bare, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	f.problem(http.MethodGet, "/families/100", bare, nil, http.StatusUnauthorized, "")
	// Of another member's session: refused.
	c.Sid = sidOf(t, f.login(ownerA).AccessToken)
	foreign, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	f.problem(http.MethodGet, "/families/100", foreign, nil, http.StatusUnauthorized, "")

	it, err := f.api.IssueTokens(context.Background(), childA)
	if err != nil || it.RefreshToken == "" || sidOf(t, it.AccessToken) == "" {
		t.Fatalf("IssueTokens = %+v, %v: want a session", it, err)
	}
	f.call(http.MethodGet, "/families/100", it.AccessToken, nil, http.StatusOK, nil)
	f.call(http.MethodPost, "/auth/logout", "", map[string]string{"refreshToken": it.RefreshToken}, http.StatusNoContent, nil)
	f.problem(http.MethodGet, "/families/100", it.AccessToken, nil, http.StatusUnauthorized, "")
	f.call(http.MethodGet, "/families/100", tok.AccessToken, nil, http.StatusOK, nil)
}

func sidOf(t *testing.T, token string) string {
	t.Helper()
	var c accessClaims
	if _, _, err := jwt.NewParser().ParseUnverified(token, &c); err != nil {
		t.Fatal(err)
	}
	return c.Sid
}
