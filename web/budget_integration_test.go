//go:build integration

package web_test

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dabom/dpcs/internal/testenv/browsertest"
)

// An app's daily data budget (#39, LIMIT:DATA:APP:<appId>), on the
// all-in-one's demo family:
//
//   - an owner chooses the app by its name from the catalog and an amount
//     in the controls, and sees it listed by name;
//   - the child's YouTube is judged BLOCKED_APP_LIMIT once its 100 MB of
//     the day are used, the rest of its data goes on;
//   - the child's rules name the budget, and YouTube's screen says
//     "유튜브 하루 100 MB 다 썼어요" and asks for more time on it;
//   - approved, YouTube goes on at once and the screen says so, live;
//   - the back office shows the budget by the app's name.
//
// Phone-sized and desktop screenshots of each new screen.
func TestAppBudgetStory(t *testing.T) {
	sys := browsertest.StartSystem(t)
	b := browsertest.New(t)
	ownerTok := sys.Token(t, sys.Owner)
	fam, child := sys.FamilyID, sys.Child.ID
	memberPath := fmt.Sprintf("/families/%d/members/%d", fam, child)
	rules := func() map[string]string {
		t.Helper()
		var p struct {
			Rules map[string]string `json:"rules"`
		}
		sys.Call(t, ownerTok, http.MethodGet, memberPath+"/policies", nil, &p)
		return p.Rules
	}
	// The demo family has 10 MB left: a gigabyte more, and none of the
	// child's own rules, so only the budget blocks YouTube.
	sys.Call(t, ownerTok, http.MethodPost, fmt.Sprintf("/families/%d/topups", fam), map[string]any{"offerId": "1GB"}, nil, http.StatusCreated)
	var remove []string
	for k := range rules() {
		remove = append(remove, k)
	}
	if len(remove) > 0 {
		sys.Call(t, ownerTok, http.MethodPatch, memberPath+"/policies", map[string]any{"remove": remove}, nil)
	}

	// The owner sets 유튜브 하루 100 MB by name.
	owner := front(t, b.Page(t, browsertest.Phone))
	browsertest.Run(t, owner, "open the app", chromedp.Navigate(sys.URL+"/app/"), chromedp.WaitVisible("#login-id", chromedp.ByID))
	login(t, owner, sys.Owner.Phone, sys.Password)
	browsertest.Run(t, owner, "open the controls", chromedp.Navigate(fmt.Sprintf("%s/app/#/controls/%d", sys.URL, child)))
	waitJS(t, owner, "the budgets card with the apps by name", 10*time.Second,
		`[...(document.querySelector('#budget-app')?.options || [])].some((o) => o.value === 'com.youtube.app' && o.textContent === '유튜브') && document.querySelector('#budget-list')?.textContent === '정한 앱이 없어요'`,
		`document.querySelector('#budgets')?.innerText`)
	// Taps and scrolls on screens a live update may draw again run in the
	// page: chromedp's lookup of a node and its use can fall on either side
	// of a redraw ("Could not find node with given id", seen in CI).
	browsertest.Run(t, owner, "choose 유튜브, 100 MB", chromedp.Evaluate(fmt.Sprintf(`(() => {
			document.querySelector('#budget-app').value = 'com.youtube.app';
			document.querySelector('#budget-amount').value = '%d';
			document.querySelector('#budget-set').click(); })()`, 100*mib), nil))
	waitAPI(t, "the budget set", 5*time.Second, func() (bool, string) {
		r := rules()
		return r["LIMIT:DATA:APP:com.youtube.app"] == strconv.Itoa(100*mib), fmt.Sprint(r)
	})
	waitJS(t, owner, "the budget listed by name", 5*time.Second,
		`document.querySelector('#budget-com_youtube_app')?.textContent.startsWith('유튜브 하루 100 MB')`, `document.querySelector('#budgets')?.innerText`)
	browsertest.Run(t, owner, "show the budgets", chromedp.Evaluate(`document.querySelector('#budgets').scrollIntoView()`, nil))
	browsertest.CheckAccessibility(t, owner, "app-budgets")
	browsertest.Screenshot(t, owner, "app-budgets")

	// The child watches 150 MB of YouTube in 50 MB steps: the third is
	// over the budget; 카카오톡 goes on.
	useData(t, sys.KafkaAddr, fam, child, "com.youtube.app", 3, 50*mib)
	useData(t, sys.KafkaAddr, fam, child, "com.kakao.talk", 1, mib)
	var day struct {
		AllowedBytes int64 `json:"allowedBytes"`
		Blocked      int64 `json:"blocked"`
	}
	waitAPI(t, "two allowed, one blocked", 20*time.Second, func() (bool, string) {
		sys.Call(t, ownerTok, http.MethodGet, memberPath+"/usage?period=day", nil, &day)
		return day.AllowedBytes == 101*mib && day.Blocked == 1, fmt.Sprintf("%+v", day)
	})

	kid := front(t, browsertest.New(t).Page(t, browsertest.Phone))
	browsertest.Run(t, kid, "open the app (child)", chromedp.Navigate(sys.URL+"/app/"), chromedp.WaitVisible("#login-id", chromedp.ByID))
	browsertest.Run(t, kid, "log in (child)", chromedp.SetValue("#login-id", strconv.FormatInt(child, 10), chromedp.ByID),
		chromedp.SetValue("#login-password", sys.Password, chromedp.ByID), chromedp.Click("#login-submit", chromedp.ByID))
	waitJS(t, kid, "the child's rules name the budget", 15*time.Second,
		`document.querySelector('#my-budget-com_youtube_app')?.textContent === '유튜브 하루 100 MB'`,
		`location.hash + ' ' + document.querySelector('#main')?.innerText`)
	browsertest.Run(t, kid, "open YouTube's screen", chromedp.Evaluate(`document.querySelector('#my-budget-com_youtube_app').click()`, nil))
	waitJS(t, kid, "YouTube's budget used up, said by name", 10*time.Second,
		`location.hash === '#/app/com.youtube.app' && document.querySelector('#app-block-h')?.textContent === '유튜브 하루 100 MB 다 썼어요' && `+
			`document.querySelector('#app-block-why')?.textContent === '보호자가 하루 100 MB까지로 정해 두었어요 (오늘 100 MB 썼어요)' && !document.querySelector('#app-ask')?.hidden`,
		`location.hash + ' ' + document.querySelector('#main')?.innerText`)
	browsertest.Run(t, kid, "ask for 30 minutes of YouTube", chromedp.Evaluate(`(() => {
			document.querySelector('#app-ask-message').value = '영상 하나만 더요';
			document.querySelector('#app-ask-send').click(); })()`, nil))
	waitJS(t, kid, "the app request is pending", 5*time.Second, `!!document.querySelector('#app-requests li[id^=app-request-]')`,
		`document.querySelector('#app-ask')?.innerText`)
	browsertest.CheckAccessibility(t, kid, "app-app-budget")
	browsertest.Screenshot(t, kid, "app-app-budget")

	// The owner approves: YouTube goes on at once.
	var list struct {
		Requests []struct {
			ID    int64  `json:"id"`
			Kind  string `json:"kind"`
			AppID string `json:"appId"`
		} `json:"requests"`
	}
	sys.Call(t, ownerTok, http.MethodGet, fmt.Sprintf("/families/%d/data-requests", fam), nil, &list)
	var rid int64
	for _, r := range list.Requests {
		if r.Kind == "APP" && r.AppID == "com.youtube.app" {
			rid = r.ID
		}
	}
	if rid == 0 {
		t.Fatalf("no APP request for YouTube: %+v", list)
	}
	sys.Call(t, ownerTok, http.MethodPost, fmt.Sprintf("/families/%d/data-requests/%d/approve", fam, rid), map[string]any{}, nil)
	waitJS(t, kid, "YouTube allowed on the child's screen, live", 10*time.Second,
		`document.querySelector('#app-block-h')?.textContent.includes('까지 쓸 수 있어요') && document.querySelector('#app-ask')?.hidden`,
		`document.querySelector('#main')?.innerText`)
	useData(t, sys.KafkaAddr, fam, child, "com.youtube.app", 1, 50*mib)
	waitAPI(t, "YouTube allowed again", 20*time.Second, func() (bool, string) {
		sys.Call(t, ownerTok, http.MethodGet, memberPath+"/usage?period=day", nil, &day)
		return day.AllowedBytes == 151*mib && day.Blocked == 1, fmt.Sprintf("%+v", day)
	})

	// The back office: the budget by the app's name.
	console := front(t, b.Page(t, browsertest.Desktop))
	browsertest.Run(t, console, "open the console", chromedp.Navigate(sys.URL+"/console/"), chromedp.WaitVisible("#login-name", chromedp.ByID))
	browsertest.Run(t, console, "sign in", chromedp.SendKeys("#login-name", sys.Admin.Phone, chromedp.ByID),
		chromedp.SendKeys("#login-password", sys.Password, chromedp.ByID), chromedp.Click("#login-form button[type=submit]", chromedp.ByQuery))
	waitJS(t, console, "signed in", 10*time.Second, `!!document.querySelector('[data-screen=search]')`, `document.body.innerText`)
	browsertest.Run(t, console, "open the family", chromedp.Navigate(fmt.Sprintf("%s/console/#/family/%d", sys.URL, fam)))
	waitJS(t, console, "the members", 15*time.Second, fmt.Sprintf(`!!document.querySelector('tr[data-member="%d"] button[data-policies]')`, child),
		`document.body.innerText`)
	browsertest.Run(t, console, "open the child's policies", chromedp.Evaluate(fmt.Sprintf(`document.querySelector('tr[data-member="%d"] button[data-policies]').click()`, child), nil))
	waitJS(t, console, "the budget by name", 10*time.Second,
		`!!document.querySelector('#policy-form-others')?.textContent.includes('하루 데이터 한도: 유튜브: 100 MB') && !document.querySelector('#policy-form-others').textContent.includes('LIMIT:')`,
		`document.querySelector('#policy-editor')?.innerText`)
	browsertest.Run(t, console, "show the policies", chromedp.Evaluate(`document.querySelector('#policy-form-others').scrollIntoView()`, nil))
	browsertest.CheckAccessibility(t, console, "console-app-budget")
	browsertest.Screenshot(t, console, "console-app-budget")

	// The owner's session (the same browser) on a desktop.
	desk := front(t, b.Page(t, browsertest.Desktop))
	browsertest.Run(t, desk, "open the controls (desktop)", chromedp.Navigate(fmt.Sprintf("%s/app/#/controls/%d", sys.URL, child)))
	waitJS(t, desk, "the budget listed (desktop)", 10*time.Second,
		`document.querySelector('#budget-com_youtube_app')?.textContent.startsWith('유튜브 하루 100 MB')`, `document.querySelector('#budgets')?.innerText`)
	browsertest.Run(t, desk, "show the budgets (desktop)", chromedp.Evaluate(`document.querySelector('#budgets').scrollIntoView()`, nil))
	browsertest.Screenshot(t, desk, "app-budgets-desktop")
}
