package api

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// browserCall sends what the family app sends: JSON, and the session
// header unless it is "" (hdr are more header pairs: "Host" sets the host).
func (f *apiFixture) browserCall(method, path, session string, cookie *http.Cookie, body string, hdr ...string) (*http.Response, map[string]any) {
	f.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, f.srv.URL+path, r)
	if err != nil {
		f.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if session != "" {
		req.Header.Set("X-DPCS-Session", session)
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	if w := internalText(data); resp.StatusCode >= 400 && w != "" {
		f.t.Errorf("%s %s: internal text %q: %s", method, path, w, data)
	}
	var out map[string]any
	if len(data) > 0 {
		if err := json.Unmarshal(data, &out); err != nil {
			f.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, data, err)
		}
	}
	return resp, out
}

func refreshCookieOf(t *testing.T, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if c.Name == "dpcs_refresh" {
			return c
		}
	}
	t.Fatalf("no dpcs_refresh cookie in %q", resp.Header.Values("Set-Cookie"))
	return nil
}

// TestRefreshCookie: a browser (X-DPCS-Session: cookie) gets its refresh
// token in an HttpOnly, SameSite=Strict cookie scoped to /auth and never in
// a body, so no script can read it; refresh and logout read the cookie but
// only with the session header (a cross-site request cannot send it) and
// not from another site (Sec-Fetch-Site). Rotation and reuse detection
// work as with JSON tokens, and logout clears the cookie.
func TestRefreshCookie(t *testing.T) {
	f := newAPIFixture(t)
	login := `{"login":"1002","password":"` + testPassword + `"}`
	resp, body := f.browserCall(http.MethodPost, "/auth/token", "cookie", nil, login)
	if resp.StatusCode != http.StatusOK || body["refreshToken"] != nil || body["accessToken"] == "" {
		t.Fatalf("cookie login: %d %v", resp.StatusCode, body)
	}
	c1 := refreshCookieOf(t, resp)
	if !c1.HttpOnly || c1.SameSite != http.SameSiteStrictMode || c1.Path != "/auth" || c1.Secure || c1.Domain != "" ||
		c1.MaxAge < int(DefaultRefreshTTL/time.Second)-60 || c1.MaxAge > int(DefaultRefreshTTL/time.Second) {
		t.Errorf("cookie on plain-http loopback: %q, want HttpOnly; SameSite=Strict; Path=/auth; Max-Age≈7 days; not Secure", resp.Header.Get("Set-Cookie"))
	}

	// Without the header, or from another site: refused, nothing rotated.
	for _, c := range []struct {
		name, session string
		hdr           []string
	}{{"no session header", "", nil}, {"another site", "cookie", []string{"Sec-Fetch-Site", "cross-site"}},
		{"a sibling site", "cookie", []string{"Sec-Fetch-Site", "same-site"}}} {
		for _, path := range []string{"/auth/refresh", "/auth/logout"} {
			if resp, body := f.browserCall(http.MethodPost, path, c.session, c1, "", c.hdr...); resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s: %s: %d %v, want 403", c.name, path, resp.StatusCode, body)
			}
		}
	}
	resp, body = f.browserCall(http.MethodPost, "/auth/refresh", "cookie", c1, "", "Sec-Fetch-Site", "same-origin")
	if resp.StatusCode != http.StatusOK || body["refreshToken"] != nil || body["accessToken"] == "" {
		t.Fatalf("cookie refresh: %d %v", resp.StatusCode, body)
	}
	c2 := refreshCookieOf(t, resp)
	if c2.Value == c1.Value || !c2.HttpOnly {
		t.Errorf("rotated cookie %+v", c2)
	}
	access := body["accessToken"].(string)
	f.call(http.MethodGet, "/families/100", access, nil, http.StatusOK, nil)

	// No cookie: 401. A rotated cookie presented again revokes the session.
	if resp, _ := f.browserCall(http.MethodPost, "/auth/refresh", "cookie", nil, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("cookie refresh without a cookie: %d, want 401", resp.StatusCode)
	}
	if resp, _ := f.browserCall(http.MethodPost, "/auth/refresh", "cookie", c1, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("reused cookie: %d, want 401", resp.StatusCode)
	}
	f.problem(http.MethodGet, "/families/100", access, nil, http.StatusUnauthorized, "")

	// Logout revokes the cookie's session and clears the cookie.
	resp, _ = f.browserCall(http.MethodPost, "/auth/token", "cookie", nil, login)
	c3 := refreshCookieOf(t, resp)
	resp, _ = f.browserCall(http.MethodPost, "/auth/logout", "cookie", c3, "")
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("cookie logout: %d", resp.StatusCode)
	}
	if gone := refreshCookieOf(t, resp); gone.MaxAge >= 0 || gone.Value != "" || gone.Path != "/auth" {
		t.Errorf("logout's cookie %q, want it cleared", resp.Header.Get("Set-Cookie"))
	}
	if resp, _ := f.browserCall(http.MethodPost, "/auth/refresh", "cookie", c3, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("refresh after logout: %d, want 401", resp.StatusCode)
	}

	// Anywhere but plain-http loopback the cookie is Secure.
	resp, _ = f.browserCall(http.MethodPost, "/auth/token", "cookie", nil, login, "Host", "dpcs.example")
	if c := refreshCookieOf(t, resp); !c.Secure {
		t.Errorf("cookie for host dpcs.example: %q, want Secure", resp.Header.Get("Set-Cookie"))
	}
	for _, host := range []string{"localhost:8080", "127.0.0.1", "[::1]:80"} {
		resp, _ = f.browserCall(http.MethodPost, "/auth/token", "cookie", nil, login, "Host", host)
		if c := refreshCookieOf(t, resp); c.Secure {
			t.Errorf("cookie for plain-http %s: Secure, which a browser would drop", host)
		}
	}

	if resp, body := f.browserCall(http.MethodPost, "/auth/token", "yes please", nil, login); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("session header %q: %d %v, want 422", "yes please", resp.StatusCode, body)
	}

	// JSON clients: as before, no cookie.
	resp, body = f.browserCall(http.MethodPost, "/auth/token", "", nil, login)
	if body["refreshToken"] == nil || len(resp.Cookies()) != 0 {
		t.Errorf("JSON login: %v, cookies %v", body, resp.Cookies())
	}
}
