//go:build integration

package web_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/dabom/dpcs/internal/testenv/browsertest"
)

// The family app's account stories in a real browser (doc/frontends.md,
// "Sessions and passwords"): a wrong password says the attempts left; the
// refresh token is in an HttpOnly cookie no script reads, and nothing
// readable holds a token; an owner resets a child's password from the
// controls and the child's open app is logged out at once; the child
// changes its own password in the settings (a common one is refused); and
// logging out leaves nothing of the family in the browser.
func TestFamilyAppAccount(t *testing.T) {
	sys := browsertest.StartSystem(t)
	childID := strconv.FormatInt(sys.Child.ID, 10)

	kid := front(t, browsertest.New(t).Page(t, browsertest.Phone))
	browsertest.Run(t, kid, "open the app (child)", chromedp.Navigate(sys.URL+"/app/"), chromedp.WaitVisible("#login-id", chromedp.ByID))
	browsertest.Run(t, kid, "a wrong password", chromedp.SetValue("#login-id", childID, chromedp.ByID),
		chromedp.SetValue("#login-password", "wrong guess", chromedp.ByID), chromedp.Click("#login-submit", chromedp.ByID))
	waitJS(t, kid, "the attempts left before the lockout", 5*time.Second,
		`document.querySelector('#login-error')?.textContent.includes('9번 더 틀리면')`, `document.querySelector('#login-error')?.textContent`)
	login(t, kid, childID, sys.Password)

	// No token where a script can read one; the refresh token is an
	// HttpOnly, SameSite=Strict cookie for /auth only.
	var readable struct{ Cookie, Storage string }
	browsertest.Run(t, kid, "read what a script can", chromedp.Evaluate(`({Cookie: document.cookie,
		Storage: JSON.stringify({...localStorage}) + JSON.stringify({...sessionStorage})})`, &readable))
	if strings.Contains(readable.Cookie, "dpcs_refresh") || strings.Contains(readable.Storage, "Token") || strings.Contains(readable.Storage, "eyJ") {
		t.Errorf("a script reads a token: cookie %q, storage %s", readable.Cookie, readable.Storage)
	}
	c := refreshCookie(t, kid, sys.URL)
	if c == nil || !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict || c.Path != "/auth" {
		t.Fatalf("refresh cookie %+v, want HttpOnly, SameSite=Strict, Path=/auth", c)
	}
	browsertest.Run(t, kid, "reload", chromedp.Reload())
	waitJS(t, kid, "the session survives a reload (refreshed from the cookie)", 10*time.Second, `!!document.querySelector('#pool-remaining')`,
		`location.hash + ' ' + document.querySelector('#main')?.innerText`)
	waitLive(t, kid)

	// The child reads its inbox when the owner resets its password.
	browsertest.Run(t, kid, "open the inbox (child)", chromedp.Navigate(sys.URL+"/app/#/inbox"))
	waitJS(t, kid, "the inbox", 5*time.Second, `!!document.querySelector('#notes')`, `document.querySelector('#main')?.innerText`)

	// The owner resets the child's password from the controls.
	owner := front(t, browsertest.New(t).Page(t, browsertest.Phone))
	browsertest.Run(t, owner, "open the app (owner)", chromedp.Navigate(sys.URL+"/app/"), chromedp.WaitVisible("#login-id", chromedp.ByID))
	login(t, owner, sys.Owner.Phone, sys.Password)
	browsertest.Run(t, owner, "open the child's controls", chromedp.Navigate(fmt.Sprintf("%s/app/#/controls/%d", sys.URL, sys.Child.ID)))
	waitJS(t, owner, "the password reset", 5*time.Second, `!!document.querySelector('#reset-password')`, `document.querySelector('#main')?.innerText`)
	browsertest.Run(t, owner, "reset to a common password", chromedp.SetValue("#reset-password", "iloveyou1", chromedp.ByID),
		chromedp.Click("#reset-submit", chromedp.ByID))
	waitJS(t, owner, "refused in Korean", 5*time.Second, `document.querySelector('#reset-status')?.textContent.includes('흔하거나')`,
		`document.querySelector('#reset-status')?.textContent`)
	const reset, mine = "summer camp 2026", "kite river lantern"
	browsertest.Run(t, owner, "reset the child's password", chromedp.SetValue("#reset-password", reset, chromedp.ByID),
		chromedp.Click("#reset-submit", chromedp.ByID))
	waitJS(t, owner, "the reset done", 5*time.Second, `document.querySelector('#reset-status')?.textContent.includes('비밀번호를 바꿨습니다')`,
		`document.querySelector('#reset-status')?.textContent`)
	browsertest.CheckAccessibility(t, owner, "app-controls-reset")
	front(t, kid)
	waitJS(t, kid, "the child's open app is logged out", 10*time.Second, `location.hash === '#/login' && !!document.querySelector('#login-id')`,
		`location.hash`)
	// Saying why, not a blank login (#38).
	waitJS(t, kid, "why the session ended", 5*time.Second, `!!document.querySelector('#login-ended')?.textContent.includes('비밀번호가 바뀌어')`,
		`document.querySelector('#main')?.innerText`)
	browsertest.CheckAccessibility(t, kid, "app-session-ended")
	browsertest.Screenshot(t, kid, "app-session-ended")
	leftBehind(t, kid, "after the session ended")

	// The child logs in with the new password and is back where its session
	// ended (#24: it was the dashboard), then changes its own password.
	browsertest.Run(t, kid, "log in again as "+childID, chromedp.SetValue("#login-id", childID, chromedp.ByID),
		chromedp.SetValue("#login-password", reset, chromedp.ByID), chromedp.Click("#login-submit", chromedp.ByID))
	waitJS(t, kid, "back on the inbox after the login", 10*time.Second, `location.hash === '#/inbox' && !!document.querySelector('#notes')`,
		`location.hash + ' ' + document.querySelector('#main')?.innerText`)
	browsertest.Run(t, kid, "open the settings", chromedp.Navigate(sys.URL+"/app/#/settings"))
	waitJS(t, kid, "the password form", 5*time.Second, `!!document.querySelector('#pw-current')`, `document.querySelector('#main')?.innerText`)
	browsertest.CheckAccessibility(t, kid, "app-settings-password")
	change := func(current, next string) {
		browsertest.Run(t, kid, "change the password to "+next, chromedp.SetValue("#pw-current", current, chromedp.ByID),
			chromedp.SetValue("#pw-new", next, chromedp.ByID), chromedp.SetValue("#pw-again", next, chromedp.ByID),
			chromedp.Click("#pw-submit", chromedp.ByID))
	}
	change(reset, "password123")
	waitJS(t, kid, "a common password refused", 15*time.Second, `document.querySelector('#pw-status')?.textContent.includes('흔하거나')`,
		`document.querySelector('#pw-status')?.textContent`)
	change("not it at all", mine)
	waitJS(t, kid, "a wrong current password refused", 15*time.Second, `document.querySelector('#pw-status')?.textContent.includes('지금 비밀번호가 맞지 않습니다')`,
		`document.querySelector('#pw-status')?.textContent`)
	change(reset, mine)
	waitJS(t, kid, "changed", 15*time.Second, `document.querySelector('#pw-status')?.textContent.includes('비밀번호를 바꿨습니다')`,
		`document.querySelector('#pw-status')?.textContent`)
	browsertest.Screenshot(t, kid, "app-settings-password")

	// Logging out leaves nothing of the family behind.
	browsertest.Run(t, kid, "log out", chromedp.Click("#logout", chromedp.ByID))
	waitJS(t, kid, "the login screen", 5*time.Second, `location.hash === '#/login' && !!document.querySelector('#login-id')`, `location.hash`)
	leftBehind(t, kid, "after logout")
	if c := refreshCookie(t, kid, sys.URL); c != nil {
		t.Errorf("the refresh cookie outlives the logout: %+v", c)
	}
	sys.Call(t, "", http.MethodPost, "/auth/token", map[string]string{"login": childID, "password": mine}, nil, http.StatusOK)
}

// refreshCookie is the browser's dpcs_refresh cookie for base, or nil.
func refreshCookie(t *testing.T, ctx context.Context, base string) *network.Cookie {
	t.Helper()
	var cookies []*network.Cookie
	browsertest.Run(t, ctx, "read the cookies", chromedp.ActionFunc(func(ctx context.Context) error {
		var err error
		cookies, err = network.GetCookies().WithURLs([]string{base + "/auth/refresh"}).Do(ctx)
		return err
	}))
	for _, c := range cookies {
		if c.Name == "dpcs_refresh" {
			return c
		}
	}
	return nil
}

// leftBehind fails when the page's origin still keeps anything of the
// family: storage other than the language choice, or a cache of the
// service worker.
func leftBehind(t *testing.T, ctx context.Context, when string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var kept []string
		browsertest.Run(t, ctx, "look for what is left "+when, chromedp.Evaluate(`(async () => [
			...Object.keys(localStorage).filter((k) => k !== 'dpcs.lang').map((k) => 'localStorage ' + k),
			...Object.keys(sessionStorage).map((k) => 'sessionStorage ' + k),
			...(await caches.keys()).map((k) => 'cache ' + k)])()`, &kept,
			func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
		if len(kept) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s the browser still keeps %v", when, kept)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
