package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/service/access"
)

func newRedisBus(t *testing.T, rdb redis.UniversalClient) *access.Redis {
	t.Helper()
	b, err := access.NewRedis(context.Background(), rdb, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
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
