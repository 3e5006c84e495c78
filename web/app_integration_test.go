//go:build integration

package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/internal/testenv/browsertest"
)

const mib = 1 << 20

// The family app's stories in a real browser against the all-in-one and its
// demo family 100 (a 10 MB pool): the owner's dashboard matches the API; a
// limit cut below a child's use blocks the child's card live (measured, ≤ 1 s)
// and shows the child the block screen with the reason; ask for more (when
// the server has the routes); a night window takes effect; the inbox updates
// live; axe-core on every screen; phone-sized screenshots of the main screens.
func TestFamilyApp(t *testing.T) {
	sys := browsertest.StartSystem(t)
	b := browsertest.New(t)
	ownerTok := sys.Token(t, sys.Owner)
	fam := sys.FamilyID
	child := sys.Child.ID

	// The owner logs in with the phone number and sees the pool the API reports.
	owner := front(t, b.Page(t, browsertest.Phone))
	browsertest.Run(t, owner, "open the app", chromedp.Navigate(sys.URL+"/app/"), chromedp.WaitVisible("#login-id", chromedp.ByID))
	browsertest.CheckAccessibility(t, owner, "app-login")
	browsertest.Screenshot(t, owner, "app-login")
	login(t, owner, sys.Owner.Phone, sys.Password)
	var dash dashboard
	sys.Call(t, ownerTok, http.MethodGet, fmt.Sprintf("/families/%d", fam), nil, &dash)
	waitJS(t, owner, "the pool shown equals the API's", 5*time.Second,
		fmt.Sprintf(`document.querySelector('#pool-remaining')?.dataset.bytes === %q`, strconv.FormatInt(dash.Pool.RemainingBytes, 10)),
		`document.querySelector('#pool-remaining')?.dataset.bytes`)
	// No usage yet: the share says so in words, not an empty ring (#24).
	waitJS(t, owner, "the empty share in words", 5*time.Second,
		`!!document.querySelector('#share .chart-empty')?.textContent.includes('아직 사용 기록이 없습니다') && !document.querySelector('#share canvas')`,
		`document.querySelector('#share')?.innerText`)

	// The child uses 3 MB (through Kafka, judged by the processor): the
	// share is drawn, live.
	useData(t, sys.KafkaAddr, fam, child, "com.youtube.app", 3, mib)
	waitAPI(t, "the child's 3 MB in the dashboard", 15*time.Second, func() (bool, string) {
		sys.Call(t, ownerTok, http.MethodGet, fmt.Sprintf("/families/%d", fam), nil, &dash)
		m := dash.member(child)
		return m.MonthlyUsedBytes >= 3*mib, fmt.Sprintf("child used %d", m.MonthlyUsedBytes)
	})
	waitJS(t, owner, "the share is drawn", 10*time.Second, `!!document.querySelector('#share svg.share-bar')`, `document.querySelector('#share')?.innerText`)

	// Page weight: everything the page loaded from /app/ (login, then the
	// dashboard), as the server sends it compressed, ≤ 120 KB (#38); the
	// chart library is loaded only by the screens that draw charts (usage).
	// (The browser's transferSize is 0 for what the service worker
	// answered, so each file is fetched again here.)
	var loaded []string
	browsertest.Run(t, owner, "list what the page loaded", chromedp.Evaluate(pageFilesJS, &loaded))
	weight := pageWeight(t, sys.URL, loaded)
	t.Logf("page weight (login + dashboard): %d files, %.1f KB compressed", len(loaded), float64(weight)/1024)
	if weight > 120*1024 || len(loaded) < 10 {
		t.Errorf("page weight %d bytes in %d files (%v), want ≤ 120 KB", weight, len(loaded), loaded)
	}
	if slices.ContainsFunc(loaded, func(p string) bool { return strings.Contains(p, "chart.umd") }) {
		t.Errorf("the dashboard loaded the chart library: %v", loaded)
	}

	// First dashboard render of a logged-in owner opening the app.
	browsertest.Run(t, owner, "reload the dashboard", chromedp.Reload())
	waitJS(t, owner, "the dashboard renders", 5*time.Second, `!!document.querySelector('#pool-remaining') && document.querySelectorAll('#members li').length === 4`, `document.querySelector('#main')?.innerText`)
	t.Logf("first dashboard render (navigation start → dashboard drawn): %v", renderTime(t, owner))
	browsertest.CheckAccessibility(t, owner, "app-dashboard")
	browsertest.Screenshot(t, owner, "app-dashboard")

	// The same owner on a desktop (same browser profile: already logged in).
	desk := front(t, b.Page(t, browsertest.Desktop))
	browsertest.Run(t, desk, "open the app on a desktop", chromedp.Navigate(sys.URL+"/app/#/dashboard"))
	waitJS(t, desk, "the desktop dashboard", 5*time.Second, `document.querySelectorAll('#members li').length === 4 && !!document.querySelector('#share svg.share-bar')`, `document.querySelector('#main')?.innerText`)
	browsertest.CheckAccessibility(t, desk, "app-dashboard-desktop")
	browsertest.Screenshot(t, desk, "app-dashboard-desktop")
	front(t, owner)

	// The child's phone and the other owner's phone.
	// Each person has an own browser (an own profile: the session is kept in localStorage).
	kid := front(t, browsertest.New(t).Page(t, browsertest.Phone))
	browsertest.Run(t, kid, "open the app (child)", chromedp.Navigate(sys.URL+"/app/"), chromedp.WaitVisible("#login-id", chromedp.ByID))
	login(t, kid, strconv.FormatInt(child, 10), sys.Password)
	mom := front(t, browsertest.New(t).Page(t, browsertest.Phone))
	browsertest.Run(t, mom, "open the app (second owner)", chromedp.Navigate(sys.URL+"/app/"), chromedp.WaitVisible("#login-id", chromedp.ByID))
	login(t, mom, strconv.FormatInt(sys.Owner2.ID, 10), sys.Password)
	childCard := fmt.Sprintf(`document.querySelector('#member-%d')?.dataset.status`, child)
	waitJS(t, mom, "the child's card shows allowed", 5*time.Second, childCard+` === 'ALLOWED'`, childCard)
	waitLive(t, kid)
	waitLive(t, mom)

	// Usage detail: the owner looks at the child's usage (the report reads
	// the persisted events: wait for the write-behind).
	waitAPI(t, "the child's 3 MB in the usage report", 30*time.Second, func() (bool, string) {
		var u struct {
			AllowedBytes int64 `json:"allowedBytes"`
		}
		sys.Call(t, ownerTok, http.MethodGet, fmt.Sprintf("/families/%d/members/%d/usage", fam, child), nil, &u)
		return u.AllowedBytes >= 3*mib, fmt.Sprintf("allowedBytes %d", u.AllowedBytes)
	})
	browsertest.Run(t, owner, "open the child's usage", chromedp.Navigate(fmt.Sprintf("%s/app/#/usage/%d", sys.URL, child)))
	waitJS(t, owner, "usage charts", 5*time.Second, `document.querySelectorAll('#usage-charts canvas').length >= 3 && !!document.querySelector('#chart-app')`, `document.querySelector('#main')?.innerText`)
	browsertest.CheckAccessibility(t, owner, "app-usage")
	browsertest.Screenshot(t, owner, "app-usage")

	// The owner moves the monthly-limit slider below the child's use.
	browsertest.Run(t, owner, "open the controls", chromedp.Navigate(fmt.Sprintf("%s/app/#/controls/%d", sys.URL, child)))
	waitJS(t, owner, "controls", 5*time.Second, `!!document.querySelector('#monthly-slider') && !!document.querySelector('#block-cat-VIDEO')`, `document.querySelector('#main')?.innerText`)
	browsertest.CheckAccessibility(t, owner, "app-controls")
	browsertest.Screenshot(t, owner, "app-controls")

	// A refusal is said in the viewer's words, never the server's (#24): an
	// alert level of 0 is refused by the API (422) and the toast says what
	// to write.
	browsertest.Run(t, owner, "save an alert level of 0", chromedp.Evaluate(`(() => {
		document.querySelector('#thresholds').value = '0';
		document.querySelector('#thresholds-form').requestSubmit();
	})()`, nil))
	waitJS(t, owner, "the refusal in Korean", 5*time.Second,
		`[...document.querySelectorAll('#toast .toast-error')].some((e) => e.textContent === '알림 기준은 1에서 99 사이의 숫자로, 쉼표로 나눠 적어 주세요.')`,
		`document.querySelector('#toast')?.innerText`)
	browsertest.Screenshot(t, owner, "app-refusal-korean")
	// What this screen cannot provoke, through the same mapping.
	var texts []string
	browsertest.Run(t, owner, "error texts", chromedp.Evaluate(`import('/app/js/util.js').then((m) => [
		m.errorText(new TypeError('Failed to fetch')),
		m.errorText({ status: 422, problem: { errors: [{ location: 'body.bytes', message: 'expected number <= 7.0368744177664e+13' }] } }),
		m.errorText({ status: 429, retryAfter: 120, problem: { detail: 'too many attempts; retry later' } }),
		m.errorText({ status: 503, problem: { detail: 'the quota state is being rebuilt: nothing granted, retry shortly' } }),
		m.errorText({ status: 422, problem: { detail: 'validation failed', errors: [{ location: 'body.windows[0].name', message: 'expected string to match pattern ^x$' }] } }),
	])`, &texts, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	if diff := cmp.Diff([]string{
		"서버에 연결할 수 없습니다. 인터넷 연결을 확인하고 잠시 뒤에 다시 해 보세요.",
		"데이터 양은 64.0 TB까지 쓸 수 있습니다.",
		"너무 자주 요청했습니다. 2분 뒤에 다시 해 보세요.",
		"지금은 처리할 수 없습니다. 잠시 뒤에 다시 해 보세요.",
		"이름에 쓸 수 없는 글자가 있습니다.",
	}, texts); diff != "" {
		t.Errorf("error texts (-want +got):\n%s", diff)
	}

	// Limits a parent understands (#24, #38): the amount box is there to
	// type in, no checkbox first, and nothing is applied until an amount is
	// chosen; 5 MB typed is applied exactly (the slider's steps on a large
	// plan cannot hit it); an amount past what a limit can be says the
	// bound and keeps what was typed; 0 is asked about first, inside the
	// card, and the outcome is said in the card, not a toast.
	rules := func() map[string]string {
		var p struct {
			Rules map[string]string `json:"rules"`
		}
		sys.Call(t, ownerTok, http.MethodGet, fmt.Sprintf("/families/%d/members/%d/policies", fam, child), nil, &p)
		return p.Rules
	}
	waitJS(t, owner, "the amount box is open", 5*time.Second, `!document.querySelector('#daily-enabled') && !document.querySelector('#daily-amount').disabled`,
		`document.querySelector('#daily-card')?.innerText`)
	if r := rules(); r["LIMIT:DATA:DAILY"] != "" {
		t.Errorf("opening the controls applied a daily limit %q", r["LIMIT:DATA:DAILY"])
	}
	browsertest.Run(t, owner, "type an absurd limit", chromedp.SetValue("#daily-amount", "99999999", chromedp.ByID),
		chromedp.SetValue("#daily-unit", fmt.Sprint(1024*mib), chromedp.ByID), chromedp.Click("#daily-set", chromedp.ByID))
	waitJS(t, owner, "the bound said, the value kept", 5*time.Second,
		`document.querySelector('#daily-note')?.textContent.includes('64.0 TB까지') && document.querySelector('#daily-amount')?.value === '99999999' && document.querySelector('#daily-unit')?.value === '`+fmt.Sprint(1024*mib)+`'`,
		`document.querySelector('#daily-card')?.innerText + ' / ' + document.querySelector('#daily-amount')?.value`)
	browsertest.Screenshot(t, owner, "app-limit-bound")
	browsertest.Run(t, owner, "type 5 MB", chromedp.SetValue("#daily-amount", "5", chromedp.ByID),
		chromedp.SetValue("#daily-unit", fmt.Sprint(mib), chromedp.ByID), chromedp.Click("#daily-set", chromedp.ByID))
	waitJS(t, owner, "applied, said in the card", 5*time.Second, `document.querySelector('#daily-note')?.textContent === '적용했습니다'`,
		`document.querySelector('#daily-card')?.innerText`)
	if r := rules(); r["LIMIT:DATA:DAILY"] != fmt.Sprint(5*mib) {
		t.Errorf("daily limit %q after typing 5 MB, want %d", r["LIMIT:DATA:DAILY"], 5*mib)
	}
	// A cut to or below what the child used today (3 MB) blocks at once:
	// asked about first (#38).
	browsertest.Run(t, owner, "type 2 MB", chromedp.SetValue("#daily-amount", "2", chromedp.ByID), chromedp.Click("#daily-set", chromedp.ByID))
	waitJS(t, owner, "a cut below the use is asked about", 5*time.Second, `!!document.querySelector('#daily-card .confirm')?.textContent.includes('바로 막혀요')`,
		`document.querySelector('#daily-card')?.innerText`)
	browsertest.CheckAccessibility(t, owner, "app-limit-below-use")
	browsertest.Screenshot(t, owner, "app-limit-below-use")
	browsertest.Run(t, owner, "keep the limit", chromedp.Evaluate(`document.querySelector('#daily-card .confirm-no').click()`, nil))
	browsertest.Run(t, owner, "type 0", chromedp.SetValue("#daily-amount", "0", chromedp.ByID), chromedp.Click("#daily-set", chromedp.ByID))
	waitJS(t, owner, "0 is asked about first", 5*time.Second, `!!document.querySelector('#daily-card .confirm')?.textContent.includes('데이터를 전혀 쓸 수 없어요')`,
		`document.querySelector('#daily-card')?.innerText`)
	if r := rules(); r["LIMIT:DATA:DAILY"] != fmt.Sprint(5*mib) {
		t.Errorf("daily limit %q before the answer, want still %d", r["LIMIT:DATA:DAILY"], 5*mib)
	}
	browsertest.CheckAccessibility(t, owner, "app-limit-confirm")
	browsertest.Screenshot(t, owner, "app-limit-confirm")
	browsertest.Run(t, owner, "confirm 0", chromedp.Evaluate(`document.querySelector('#daily-card .confirm-yes').click()`, nil))
	waitAPI(t, "the daily limit is 0", 5*time.Second, func() (bool, string) { r := rules(); return r["LIMIT:DATA:DAILY"] == "0", fmt.Sprint(r) })
	waitJS(t, owner, "0 shown in the card", 5*time.Second, `document.querySelector('#daily-value')?.textContent === '0 B' && !document.querySelector('#daily-card .confirm')`,
		`document.querySelector('#daily-card')?.innerText`)
	browsertest.Run(t, owner, "remove the daily limit", chromedp.Evaluate(`document.querySelector('#daily-clear').click()`, nil))
	waitAPI(t, "the daily limit is gone", 5*time.Second, func() (bool, string) { _, ok := rules()["LIMIT:DATA:DAILY"]; return !ok, fmt.Sprint(rules()) })
	waitJS(t, owner, "the child allowed again", 10*time.Second, `document.querySelector('#controls-status')?.dataset.status === 'ALLOWED'`,
		`document.querySelector('#controls-status')?.textContent + ' / ' + document.querySelector('#windows')?.innerText`)
	waitJS(t, kid, "the child on the dashboard", 15*time.Second, `location.hash === '#/dashboard'`, `location.hash`)
	// The other owner's dashboard is read again, so that the block below is
	// seen arriving live.
	browsertest.Run(t, mom, "reload the other owner's dashboard", chromedp.Reload())
	waitJS(t, mom, "the child's card allowed", 10*time.Second, childCard+` === 'ALLOWED'`, childCard)

	// A cut below the child's use is asked about first (#38); the clock
	// runs from the parent's yes.
	browsertest.Run(t, owner, "move the slider to 1 MB", chromedp.Evaluate(fmt.Sprintf(`(() => {
		const s = document.querySelector('#monthly-slider');
		s.value = %d; s.dispatchEvent(new Event('input')); s.dispatchEvent(new Event('change'));
	})()`, mib), nil))
	waitJS(t, owner, "the cut asked about", 5*time.Second, `!!document.querySelector('#monthly-card .confirm-yes')`, `document.querySelector('#monthly-card')?.innerText`)
	start := time.Now()
	browsertest.Run(t, owner, "apply it", chromedp.Evaluate(`document.querySelector('#monthly-card .confirm-yes').click()`, nil))
	waitJS(t, mom, "the child's card turns blocked on the other owner's phone", 5*time.Second, childCard+` === 'BLOCKED'`, childCard)
	live := time.Since(start)
	t.Logf("slider released → child's card blocked on another phone (SSE, no reload): %v", live.Round(time.Millisecond))
	if bound := testenv.LatencyBound(t, time.Second); live > bound {
		t.Errorf("the child's card turned blocked after %v, want ≤ %v", live, bound)
	}
	waitJS(t, kid, "the child sees the block screen", 5*time.Second, `location.hash === '#/block' && document.querySelector('#block-reason')?.dataset.decision === 'BLOCKED_LIMIT_MONTHLY'`,
		`location.hash + ' ' + document.querySelector('#main')?.innerText`)
	t.Logf("slider released → the child's block screen: %v", time.Since(start).Round(time.Millisecond))
	var block struct{ Reason, Until, Owners string } // read at once: the screen re-renders on every update
	browsertest.Run(t, kid, "read the block screen", chromedp.Evaluate(`({Reason: document.querySelector('#block-reason').textContent,
		Until: document.querySelector('#block-until').textContent, Owners: document.querySelector('#block-owners').textContent})`, &block))
	if !strings.Contains(block.Reason, "월 한도") || !strings.Contains(block.Until, "다음 달") ||
		!strings.Contains(block.Owners, sys.Owner.Name) || !strings.Contains(block.Owners, sys.Owner2.Name) {
		t.Errorf("block screen: why %q, until %q, ask %q", block.Reason, block.Until, block.Owners)
	}
	browsertest.CheckAccessibility(t, kid, "app-block")
	browsertest.Screenshot(t, kid, "app-block")

	t.Run("ask for more", func(t *testing.T) {
		if !hasRoute(t, sys.URL, "/families/{familyId}/data-requests") {
			t.Skip("the server has no /families/{familyId}/data-requests route yet (ask-for-more backend not merged)")
		}
		waitJS(t, kid, "a data request offered for a data block", 5*time.Second,
			`!document.querySelector('#ask')?.hidden && document.querySelector('#ask-not-data')?.hidden`, `document.querySelector('#main')?.innerText`)
		browsertest.Run(t, kid, "ask for 100 MB", chromedp.SetValue("#ask-amount", strconv.Itoa(100*mib), chromedp.ByID),
			chromedp.SetValue("#ask-message", "숙제 동영상", chromedp.ByID), chromedp.Click("#ask-send", chromedp.ByID))
		start := time.Now()
		waitJS(t, mom, "the owner sees the request live", 5*time.Second, `document.querySelectorAll('#requests li.request').length > 0`, `document.querySelector('#requests')?.innerText`)
		t.Logf("request sent → shown to the owner: %v", time.Since(start).Round(time.Millisecond))
		browsertest.CheckAccessibility(t, mom, "app-dashboard-request")
		// The other owner answers from the request's inbox item (#24).
		browsertest.Run(t, owner, "open the inbox (owner)", chromedp.Navigate(sys.URL+"/app/#/inbox"))
		waitJS(t, owner, "the request answerable in the inbox", 10*time.Second,
			`!!document.querySelector('#notes li.note[data-kind=DATA_REQUESTED] .note-answer button.primary')`, `document.querySelector('#notes')?.innerText`)
		browsertest.CheckAccessibility(t, owner, "app-inbox-request")
		browsertest.Screenshot(t, owner, "app-inbox-request")
		browsertest.Run(t, owner, "approve for this month from the inbox", chromedp.Evaluate(`(() => {
			const a = document.querySelector('#notes li.note[data-kind=DATA_REQUESTED] .note-answer');
			a.querySelector('select').value = 'MONTH';
			a.querySelector('button.primary').click();
		})()`, nil))
		start = time.Now()
		waitJS(t, kid, "the child is unblocked live", 5*time.Second, `location.hash === '#/dashboard' && document.querySelector('#member-`+strconv.FormatInt(child, 10)+`')?.dataset.status === 'ALLOWED'`,
			`location.hash + ' ' + document.querySelector('#main')?.innerText`)
		t.Logf("approved → the child's app unblocked: %v", time.Since(start).Round(time.Millisecond))
		waitJS(t, owner, "the inbox item says it is answered", 5*time.Second,
			`document.querySelector('#notes li.note[data-kind=DATA_REQUESTED] .note-answer')?.textContent === '이미 답한 부탁입니다'`,
			`document.querySelector('#notes')?.innerText`)
		// The child's card says what is left of its limit, the approved extra included.
		waitJS(t, kid, "what is left of the monthly limit", 5*time.Second,
			`/이번 달 .+ 남음 \/ /.test(document.querySelector('#limits-`+strconv.FormatInt(child, 10)+`')?.textContent || '')`,
			`document.querySelector('#members')?.innerText`)
	})

	// A request answered from its Web Push notification's buttons (#24): the
	// service worker runs js/answer.js, which exchanges the refresh cookie
	// for a token under the app's refresh lock and answers. Run here in the
	// owner's page (headless Chromium reaches no push service): the request
	// is declined, a second answer says it was answered already, and the
	// page's own session goes on (the rotated cookie is the page's too).
	t.Run("answer from the notification", func(t *testing.T) {
		if !hasRoute(t, sys.URL, "/families/{familyId}/data-requests") {
			t.Skip("no data requests")
		}
		var req struct{ ID int64 }
		sys.Call(t, sys.Token(t, sys.Child), http.MethodPost, fmt.Sprintf("/families/%d/data-requests", sys.FamilyID),
			map[string]any{"amountBytes": 10 * mib, "message": "지도 앱"}, &req, http.StatusCreated)
		browsertest.Run(t, owner, "load the notification's answer script",
			chromedp.Evaluate(`new Promise((ok, fail) => { const s = document.createElement('script'); s.src = '/app/js/answer.js';
				s.onload = () => ok(true); s.onerror = fail; document.head.append(s); })`, nil, awaitPromise))
		answer := func(action string) string {
			var res string
			browsertest.Run(t, owner, "answer "+action+" as the service worker does", chromedp.Evaluate(
				fmt.Sprintf(`self.dpcsAnswer({familyId: %d, requestId: %d}, %q)`, sys.FamilyID, req.ID, action), &res, awaitPromise))
			return res
		}
		if got := answer("decline"); got != "declined" {
			t.Fatalf("decline from the notification: %q", got)
		}
		if got := answer("approve"); got != "answered" {
			t.Errorf("approve after the decline: %q, want answered", got)
		}
		var r struct{ Status string }
		sys.Call(t, sys.Token(t, sys.Owner), http.MethodGet, fmt.Sprintf("/families/%d/data-requests/%d", sys.FamilyID, req.ID), nil, &r)
		if r.Status != "DECLINED" {
			t.Errorf("request status %q, want DECLINED", r.Status)
		}
		var ok bool
		browsertest.Run(t, owner, "the page refreshes its own session after", chromedp.Evaluate(
			`import('/app/js/api.js').then((m) => m.refresh()).then(() => true, () => false)`, &ok, awaitPromise))
		if !ok {
			t.Error("the page's session ended after the notification's answer")
		}
	})

	// Clear the limit from the controls (reloaded: another owner's approval
	// changed the policies since): the child is allowed again.
	browsertest.Run(t, owner, "open the controls again", chromedp.Navigate(fmt.Sprintf("%s/app/#/controls/%d", sys.URL, child)))
	waitJS(t, owner, "controls", 5*time.Second, `!!document.querySelector('#monthly-clear')`, `document.querySelector('#main')?.innerText`)
	if hasRoute(t, sys.URL, "/families/{familyId}/data-requests") {
		// The approved month's extra shows in the monthly limit (#24).
		waitJS(t, owner, "the approved extra in the controls", 5*time.Second,
			`!!document.querySelector('#monthly-extras li')?.textContent.includes('100 MB')`, `document.querySelector('#monthly-card')?.innerText`)
	}
	browsertest.Run(t, owner, "remove the monthly limit", chromedp.Evaluate(`document.querySelector('#monthly-clear').click()`, nil))
	waitJS(t, owner, "the limit is off", 5*time.Second, `document.querySelector('#monthly-value')?.textContent === '한도 없음' && document.querySelector('#controls-status').dataset.status === 'ALLOWED'`,
		`document.querySelector('#controls-status')?.textContent + ' / ' + document.querySelector('#windows')?.innerText`)
	waitJS(t, kid, "the child is back on the dashboard", 15*time.Second, `location.hash === '#/dashboard'`, `location.hash`)

	// A night window around now (the service zone), named in Korean ("밤" was
	// refused before #24), blocks the child at once; removing it allows again.
	zone, err := time.LoadLocation("Asia/Seoul")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().In(zone)
	from, to := now.Add(-time.Hour).Format("15:04"), now.Add(time.Hour).Format("15:04")
	// A preset fills the form as a parent would pick it (#24): school nights.
	var preset struct {
		Name, Start, End string
		Days             []string
	}
	browsertest.Run(t, owner, "pick the school-nights preset", chromedp.Click("#preset-schoolNight", chromedp.ByID),
		chromedp.Evaluate(`({Name: document.querySelector('#window-name').value, Start: document.querySelector('#window-start').value,
			End: document.querySelector('#window-end').value,
			Days: [...document.querySelectorAll('#window-form .days input:checked')].map((c) => c.value)})`, &preset))
	if preset.Name != "평일밤" || preset.Start != "22:00" || preset.End != "07:00" || strings.Join(preset.Days, ",") != "MON,TUE,WED,THU,SUN" {
		t.Errorf("school-nights preset filled %+v", preset)
	}
	browsertest.Screenshot(t, owner, "app-window-presets")
	browsertest.Run(t, owner, "clear the preset's days", chromedp.Evaluate(
		`document.querySelectorAll('#window-form .days input').forEach((c) => { c.checked = false; })`, nil))
	start = time.Now()
	browsertest.Run(t, owner, "add a night window", chromedp.SetValue("#window-name", "밤", chromedp.ByID),
		chromedp.SetValue("#window-start", from, chromedp.ByID), chromedp.SetValue("#window-end", to, chromedp.ByID),
		chromedp.Click("#window-add", chromedp.ByID))
	waitJS(t, owner, "the window is listed and the child blocked", 5*time.Second,
		`!!document.querySelector('#window-밤') && document.querySelector('#controls-status').dataset.status === 'BLOCKED'`,
		`document.querySelector('#windows')?.innerText + ' / ' + document.querySelector('#controls-status')?.textContent`)
	var pol struct {
		Rules    map[string]string `json:"rules"`
		Standing struct{ Decision, Rule string }
	}
	sys.Call(t, ownerTok, http.MethodGet, fmt.Sprintf("/families/%d/members/%d/policies", fam, child), nil, &pol)
	if pol.Rules["BLOCK:TIME:밤"] == "" || pol.Standing.Decision != "BLOCKED_TIME" {
		t.Errorf("after the window edit: rules %v standing %+v, want BLOCK:TIME:밤 and BLOCKED_TIME", pol.Rules, pol.Standing)
	}
	waitJS(t, kid, "the child sees the window's block screen", 35*time.Second, `document.querySelector('#block-reason')?.dataset.decision === 'BLOCKED_TIME' && document.querySelector('#block-reason').textContent.includes('밤')`,
		`location.hash + ' ' + document.querySelector('#main')?.innerText`)
	t.Logf("night window added → the child's block screen: %v", time.Since(start).Round(time.Millisecond))
	// More data would not lift a time window: no data request is offered;
	// the child asks for minutes instead ("30분 더", #24).
	waitJS(t, kid, "a time request for a time block", 5*time.Second,
		`document.querySelector('#ask')?.hidden && !document.querySelector('#ask-time')?.hidden && document.querySelector('#ask-not-data')?.hidden`,
		`document.querySelector('#main')?.innerText`)
	browsertest.CheckAccessibility(t, kid, "app-block-time")
	browsertest.Screenshot(t, kid, "app-block-time")
	t.Run("30 more minutes", func(t *testing.T) {
		// Taps run in the page: a live update may draw the card again
		// between finding a node and clicking it.
		browsertest.Run(t, kid, "ask for 30 minutes", chromedp.Evaluate(`(() => { const m = document.querySelector('#ask-time-message'); m.value = '숙제 마무리할게요';
			m.dispatchEvent(new Event('input', { bubbles: true })); document.querySelector('#ask-time-send').click(); })()`, nil))
		waitJS(t, kid, "the time request is pending", 5*time.Second,
			`!!document.querySelector('#my-time-requests li[id^=ask-time-request-]')?.textContent.includes('쉬는 시간에 30분 더')`,
			`document.querySelector('#ask-time')?.innerText`)
		browsertest.Run(t, owner, "open the dashboard (owner)", chromedp.Navigate(sys.URL+"/app/#/dashboard"))
		waitJS(t, owner, "the owner sees the time request", 10*time.Second,
			`!!document.querySelector('#requests li.request[data-kind=TIME]')?.textContent.includes('쉬는 시간에 30분 더')`,
			`document.querySelector('#requests')?.innerText`)
		browsertest.Screenshot(t, owner, "app-request-time")
		start := time.Now()
		waitJS(t, owner, "approve the 30 minutes", 5*time.Second,
			`(() => { const b = document.querySelector('#requests li.request[data-kind=TIME] button.primary'); if (b && !b.dataset.tapped) { b.dataset.tapped = '1'; b.click(); }
				return !!b && b.dataset.tapped === '1' || !document.querySelector('#requests li.request[data-kind=TIME]'); })()`,
			`document.querySelector('#requests')?.innerText`)
		waitJS(t, kid, "the child is let through for 30 minutes", 10*time.Second,
			`location.hash === '#/dashboard' && !!document.querySelector('#my-exceptions')?.textContent.includes('쉬는 시간 잠시 해제')`,
			`location.hash + ' ' + document.querySelector('#main')?.innerText`)
		t.Logf("30 minutes approved → the child's screen let through: %v", time.Since(start).Round(time.Millisecond))
		waitJS(t, kid, "when the downtime begins next", 5*time.Second, `!!document.querySelector('#next-downtime')?.textContent.startsWith('다음 차단 시간대: 밤')`,
			`document.querySelector('#my-rules')?.innerText`)
		browsertest.Screenshot(t, kid, "app-dashboard-child-exception")
		if r := rules(); len(r["EXCEPT:TIME"]) != 12 {
			t.Errorf("after the approval: rules %v, want EXCEPT:TIME", r)
		}
		// The controls list it with a way to end it, and the categories
		// still allowed in a downtime: messaging, ticked once.
		browsertest.Run(t, owner, "open the controls (exceptions)", chromedp.Navigate(fmt.Sprintf("%s/app/#/controls/%d", sys.URL, child)))
		waitJS(t, owner, "the exception listed", 10*time.Second, `!!document.querySelector('#windows-exceptions')?.textContent.includes('쉬는 시간 잠시 해제')`,
			`document.querySelector('#windows')?.innerText`)
		waitJS(t, owner, "messaging allowed in downtime", 5*time.Second,
			`(() => { const b = document.querySelector('#allow-cat-MESSAGING'); if (b && !b.checked && !b.dataset.tapped) { b.dataset.tapped = '1'; b.click(); }
				return !!b && b.checked; })()`, `document.querySelector('#always-allowed')?.innerText`)
		waitAPI(t, "messaging allowed", 5*time.Second, func() (bool, string) { r := rules(); return r["ALLOW:CATEGORY:MESSAGING"] == "1", fmt.Sprint(r) })
		browsertest.CheckAccessibility(t, owner, "app-controls-exceptions")
		browsertest.Run(t, owner, "show the windows card", chromedp.Evaluate(`document.querySelector('#windows')?.scrollIntoView()`, nil))
		browsertest.Screenshot(t, owner, "app-controls-exceptions")
		waitJS(t, owner, "the exception ended and the child blocked again", 5*time.Second,
			`(() => { const b = document.querySelector('#windows-exceptions button'); if (b && !b.dataset.tapped) { b.dataset.tapped = '1'; b.click(); }
				return !document.querySelector('#windows-exceptions') && document.querySelector('#controls-status').dataset.status === 'BLOCKED'; })()`,
			`document.querySelector('#controls-status')?.textContent + ' / ' + document.querySelector('#windows')?.innerText`)
		// A time request approved from its push notification grants its
		// minutes (a grant of data would be refused): as the service worker does.
		var req struct{ ID int64 }
		sys.Call(t, sys.Token(t, sys.Child), http.MethodPost, fmt.Sprintf("/families/%d/data-requests", fam),
			map[string]any{"kind": "TIME", "minutes": 15}, &req, http.StatusCreated)
		var res string
		browsertest.Run(t, owner, "approve 15 minutes as the service worker does", chromedp.Evaluate(
			`new Promise((ok, fail) => { const s = document.createElement('script'); s.src = '/app/js/answer.js';
				s.onload = () => ok(true); s.onerror = fail; document.head.append(s); })`, nil, awaitPromise),
			chromedp.Evaluate(fmt.Sprintf(`self.dpcsAnswer({familyId: %d, requestId: %d, kind: 'TIME'}, 'approve')`, fam, req.ID), &res, awaitPromise))
		if res != "approved" {
			t.Errorf("a time request approved from its notification: %q", res)
		}
		waitAPI(t, "15 minutes granted", 5*time.Second, func() (bool, string) { r := rules(); return len(r["EXCEPT:TIME"]) == 12, fmt.Sprint(r) })
		// The controls read the policy changed behind them afresh.
		browsertest.Run(t, owner, "reload the controls", chromedp.Reload())
		waitJS(t, owner, "the new exception listed", 10*time.Second, `!!document.querySelector('#windows-exceptions')`,
			`document.querySelector('#windows')?.innerText`)
	})
	// The card may be drawn again by a live update between the tap and the
	// click (a tap on the old card does nothing): tap the card shown, once.
	waitJS(t, owner, "the window is gone and the child allowed", 5*time.Second,
		`(() => { const b = document.querySelector('#window-밤 button'); if (b && !b.dataset.tapped) { b.dataset.tapped = '1'; b.click(); }
			return !document.querySelector('#window-밤') && document.querySelector('#controls-status').dataset.status === 'ALLOWED'; })()`,
		`document.querySelector('#controls-status')?.textContent + ' / ' + document.querySelector('#windows')?.innerText`)

	// While allowed, the child sees what is restricted for it (#24): a
	// blocked category is listed on its dashboard, by its Korean name.
	browsertest.Run(t, owner, "block the games category", chromedp.Evaluate(`document.querySelector('#block-cat-GAME').click()`, nil))
	waitAPI(t, "games blocked", 5*time.Second, func() (bool, string) { r := rules(); return r["BLOCK:CATEGORY:GAME"] == "1", fmt.Sprint(r) })
	browsertest.Run(t, kid, "open the dashboard (child)", chromedp.Navigate(sys.URL+"/app/#/dashboard"), chromedp.Reload())
	waitJS(t, kid, "the child's restrictions listed", 10*time.Second, `!!document.querySelector('#my-rules-list')?.textContent.includes('막힌 분류: 게임')`,
		`document.querySelector('#my-rules')?.innerText`)
	browsertest.CheckAccessibility(t, kid, "app-dashboard-child")
	browsertest.Screenshot(t, kid, "app-dashboard-child")
	browsertest.Run(t, owner, "unblock the games category", chromedp.Evaluate(`document.querySelector('#block-cat-GAME').click()`, nil))
	waitAPI(t, "games unblocked", 5*time.Second, func() (bool, string) { _, ok := rules()["BLOCK:CATEGORY:GAME"]; return !ok, fmt.Sprint(rules()) })

	// Apps by name, never by package id (#24): the controls offer
	// "유튜브", and the child's restrictions name it so.
	waitJS(t, owner, "apps listed by name", 5*time.Second,
		`(() => { const l = document.querySelector('label[for=block-app-com_youtube_app]'); return !!l && l.textContent.includes('유튜브') && !l.textContent.includes('com.youtube'); })()`,
		`document.querySelector('#apps')?.innerText`)
	// The controls may be drawn again by a live update between two taps:
	// tap the box shown while it is not ticked, once per box.
	waitJS(t, owner, "YouTube ticked", 5*time.Second,
		`(() => { const b = document.querySelector('#block-app-com_youtube_app'); if (b && !b.checked && !b.dataset.tapped) { b.dataset.tapped = '1'; b.click(); }
			return !!b && b.checked; })()`, `document.querySelector('#apps')?.innerText`)
	waitAPI(t, "YouTube blocked", 5*time.Second, func() (bool, string) { r := rules(); return r["BLOCK:APP:com.youtube.app"] == "1", fmt.Sprint(r) })
	browsertest.Run(t, kid, "open the dashboard again (child)", chromedp.Reload())
	waitJS(t, kid, "the blocked app named", 10*time.Second, `!!document.querySelector('#my-rules-list')?.textContent.includes('막힌 앱: 유튜브')`,
		`document.querySelector('#my-rules')?.innerText`)
	browsertest.Screenshot(t, kid, "app-dashboard-child-app")
	// Element.append and replaceChildren write a null child as the text
	// "null" (it showed on the owner's and the child's dashboards).
	noNull := func(name string, ctx context.Context) {
		var lines []string
		browsertest.Run(t, ctx, "read the page's lines ("+name+")", chromedp.Evaluate(`document.querySelector('#main').innerText.split('\n').map((l) => l.trim())`, &lines))
		if slices.Contains(lines, "null") {
			t.Errorf("the %s's page shows \"null\": %q", name, lines)
		}
	}
	noNull("child's dashboard", kid)
	// The child opens YouTube's own screen and asks for 30 minutes with a
	// message (#38); an owner approves it from the dashboard: the engine
	// lets YouTube through until then, and the child's screen says so live.
	browsertest.Run(t, kid, "open YouTube's screen", chromedp.Click("#ask-app-com_youtube_app", chromedp.ByID))
	waitJS(t, kid, "YouTube's block screen", 10*time.Second,
		`location.hash === '#/app/com.youtube.app' && !document.querySelector('#app-ask')?.hidden && document.querySelector('#app-block-h')?.textContent.startsWith('유튜브')`,
		`location.hash + ' ' + document.querySelector('#main')?.innerText`)
	browsertest.Run(t, kid, "ask for 30 minutes of YouTube", chromedp.SetValue("#app-ask-message", "숙제 영상 보려고요", chromedp.ByID),
		chromedp.Click("#app-ask-send", chromedp.ByID))
	waitJS(t, kid, "the app request is pending", 5*time.Second, `!!document.querySelector('#app-requests li[id^=app-request-]')`,
		`document.querySelector('#app-ask')?.innerText`)
	browsertest.CheckAccessibility(t, kid, "app-app-block")
	browsertest.Screenshot(t, kid, "app-app-block")
	browsertest.Run(t, owner, "open the dashboard (app request)", chromedp.Navigate(sys.URL+"/app/#/dashboard"))
	waitJS(t, owner, "the owner sees the app request", 10*time.Second,
		`!!document.querySelector('#requests li.request[data-kind=APP]')?.textContent.includes('유튜브 30분 더')`,
		`document.querySelector('#requests')?.innerText`)
	noNull("owner's dashboard", owner)
	waitJS(t, owner, "the child's words with the app request", 5*time.Second,
		`!!document.querySelector('#requests li.request[data-kind=APP] q')?.textContent.includes('숙제 영상 보려고요')`,
		`document.querySelector('#requests')?.innerText`)
	// Clicked in the page, query and click at once: the live dashboard may
	// draw the request again between a lookup and a click of chromedp's.
	browsertest.Run(t, owner, "approve YouTube's 30 minutes",
		chromedp.Evaluate(`document.querySelector('#requests li.request[data-kind=APP] button.primary').click()`, nil))
	waitAPI(t, "YouTube excepted", 5*time.Second, func() (bool, string) { r := rules(); return len(r["EXCEPT:APP:com.youtube.app"]) == 12, fmt.Sprint(r) })
	waitJS(t, kid, "YouTube allowed on the child's screen, live", 5*time.Second,
		`document.querySelector('#app-block-h')?.textContent.includes('까지 쓸 수 있어요') && document.querySelector('#app-ask')?.hidden`,
		`document.querySelector('#main')?.innerText`)
	browsertest.Run(t, owner, "back to the controls (apps)", chromedp.Navigate(fmt.Sprintf("%s/app/#/controls/%d", sys.URL, child)))
	waitJS(t, owner, "YouTube's exception listed", 10*time.Second, `!!document.querySelector('#apps-exceptions')?.textContent.includes('유튜브 잠시 허용')`,
		`document.querySelector('#apps')?.innerText`)
	waitJS(t, owner, "YouTube unticked", 5*time.Second,
		`(() => { const b = document.querySelector('#block-app-com_youtube_app'); if (b && b.checked && !b.dataset.untapped) { b.dataset.untapped = '1'; b.click(); }
			return !!b && !b.checked; })()`, `document.querySelector('#apps')?.innerText`)
	waitAPI(t, "YouTube unblocked", 5*time.Second, func() (bool, string) { _, ok := rules()["BLOCK:APP:com.youtube.app"]; return !ok, fmt.Sprint(rules()) })

	// The inbox updates live: the child watches it while the family passes
	// the 50 % threshold.
	browsertest.Run(t, kid, "open the inbox", chromedp.Navigate(sys.URL+"/app/#/inbox"))
	waitJS(t, kid, "the inbox", 5*time.Second, `!!document.querySelector('#notes')`, `document.querySelector('#main')?.innerText`)
	waitLive(t, kid)
	before := countJS(t, kid, `document.querySelectorAll('#notes li.note[data-kind=THRESHOLD_ALERT]').length`)
	useData(t, sys.KafkaAddr, fam, child, "com.kakao.talk", 3, mib)
	waitJS(t, kid, "a threshold alert appears in the open inbox", 10*time.Second,
		fmt.Sprintf(`document.querySelectorAll('#notes li.note[data-kind=THRESHOLD_ALERT]').length > %d`, before),
		`document.querySelector('#notes')?.innerText`)
	// Only owners can top up (#38: a child was told "데이터를 충전해주세요"):
	// the child's alert says to ask a parent and offers no top-up.
	var alert struct {
		Text  string
		TopUp bool
	}
	browsertest.Run(t, kid, "read the child's alert", chromedp.Evaluate(`(() => { const n = document.querySelector('#notes li.note[data-kind=THRESHOLD_ALERT]');
		return {Text: n.innerText, TopUp: !!n.querySelector('[id^=note-topup-]')}; })()`, &alert))
	if !strings.Contains(alert.Text, "보호자에게 부탁하세요") || strings.Contains(alert.Text, "충전해주세요") || alert.TopUp {
		t.Errorf("the child's threshold alert: %q (a top-up offered: %v), want it to say to ask a parent", alert.Text, alert.TopUp)
	}
	browsertest.CheckAccessibility(t, kid, "app-inbox")
	browsertest.Screenshot(t, kid, "app-inbox")
	browsertest.Run(t, kid, "mark it read", chromedp.Click(`#notes li.note.unread[data-kind=THRESHOLD_ALERT] button`, chromedp.ByQuery))
	kidTok := sys.Token(t, sys.Child)
	waitAPI(t, "the alert read in the inbox", 5*time.Second, func() (bool, string) {
		var page struct {
			Items []struct {
				Kind   string `json:"kind"`
				ReadAt string `json:"readAt"`
			} `json:"items"`
		}
		sys.Call(t, kidTok, http.MethodGet, fmt.Sprintf("/families/%d/notifications", fam), nil, &page)
		for _, n := range page.Items {
			if n.Kind == "THRESHOLD_ALERT" && n.ReadAt != "" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", page.Items)
	})

	// A fresh tab of the owner's browser (the same profile: logged in, the
	// service worker installed) for what follows: a tab's actions have 2
	// minutes, and a busy machine can spend them on the stories above.
	owner = front(t, b.Page(t, browsertest.Phone))
	browsertest.Run(t, owner, "open the app in a new tab (owner)", chromedp.Navigate(sys.URL+"/app/#/dashboard"))
	waitJS(t, owner, "the owner's dashboard in the new tab", 10*time.Second, `!!document.querySelector('#pool-remaining')`,
		`location.hash + ' ' + document.querySelector('#main')?.innerText`)
	// Once an alert level was passed, the owner's pool card offers a top-up
	// (#38: at 9 % left the owner's dashboard had no top-up button).
	waitJS(t, owner, "the pool card's top-up", 10*time.Second,
		`document.querySelector('#pool-low')?.textContent.includes('미만 남았어요') && document.querySelector('#pool-topup')?.getAttribute('href') === '#/controls/0/topup'`,
		`document.querySelector('#pool-remaining')?.closest('section')?.innerText`)

	// Offline: the service worker keeps the shell; with the API unreachable
	// the app shows the last dashboard it kept, marked as such.
	waitJS(t, owner, "the service worker controls the app", 10*time.Second, `!!navigator.serviceWorker.controller`, `navigator.serviceWorker.controller`)
	var cached bool
	browsertest.Run(t, owner, "look in the shell cache", chromedp.Evaluate(`(async () => {
		const keys = await caches.keys();
		for (const k of keys) {
			const c = await caches.open(k);
			if (await c.match('/app/index.html') && await c.match('/app/vendor/chart.umd.min.js') && await c.match('/app/js/views.js')) return true;
		}
		return false;
	})()`, &cached, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	if !cached {
		t.Error("the service worker's cache lacks the app shell")
	}
	restore := apiUnreachable(t, owner)
	browsertest.Run(t, owner, "reload with the API unreachable", chromedp.Navigate(sys.URL+"/app/#/dashboard"), chromedp.Reload())
	waitJS(t, owner, "the last known dashboard offline", 10*time.Second,
		`document.querySelector('#live')?.textContent.includes('오프라인') && !!document.querySelector('#pool-remaining')`,
		`document.querySelector('#live')?.textContent + ' / ' + document.querySelector('#main')?.innerText`)
	// A screen that cannot load says why in words and loads again by itself
	// once the API is back (#24: "오류: Failed to fetch", and no recovery).
	browsertest.Run(t, owner, "open the controls with the API unreachable", chromedp.Navigate(fmt.Sprintf("%s/app/#/controls/%d", sys.URL, child)))
	waitJS(t, owner, "why, in words", 10*time.Second,
		`document.querySelector('#main p.error')?.textContent.startsWith('서버에 연결할 수 없습니다') && !!document.querySelector('#retrying')`,
		`document.querySelector('#main')?.innerText`)
	browsertest.Screenshot(t, owner, "app-offline")
	restore()
	waitJS(t, owner, "the controls load by themselves", 40*time.Second, `!!document.querySelector('#monthly-slider')`,
		`document.querySelector('#main')?.innerText`)

	// Top-ups with their price, asked about first (#24): the operator's
	// offers (DPCS_TOPUP_OFFERS' default: 1 GB for 9,900 won).
	poolTotal := func() int64 {
		var d struct {
			Pool struct {
				TotalBytes int64 `json:"totalBytes"`
			} `json:"pool"`
		}
		sys.Call(t, ownerTok, http.MethodGet, fmt.Sprintf("/families/%d", fam), nil, &d)
		return d.Pool.TotalBytes
	}
	total := poolTotal()
	waitJS(t, owner, "top-ups with their prices", 5*time.Second, `!!document.querySelector('#topup-1024')?.textContent.includes('9,900원')`,
		`document.querySelector('#topup')?.innerText`)
	browsertest.Run(t, owner, "tap 1 GB", chromedp.Click("#topup-1024", chromedp.ByID))
	waitJS(t, owner, "the top-up asked about", 5*time.Second, `!!document.querySelector('#topup .confirm')?.textContent.includes('9,900원(부가세 포함)에 충전할까요')`,
		`document.querySelector('#topup')?.innerText`)
	if poolTotal() != total {
		t.Error("the pool grew before the top-up was confirmed")
	}
	browsertest.Run(t, owner, "show the top-up card", chromedp.ScrollIntoView("#topup", chromedp.ByID))
	browsertest.Screenshot(t, owner, "app-topup-confirm")
	browsertest.Run(t, owner, "confirm the top-up", chromedp.Evaluate(`document.querySelector('#topup .confirm-yes').click()`, nil))
	waitJS(t, owner, "the top-up said in its card", 5*time.Second, `!!document.querySelector('#topup-note')?.textContent.includes('충전했습니다 (9,900원, 휴대폰 요금에 합산)')`,
		`document.querySelector('#topup')?.innerText`)
	waitAPI(t, "the pool grew by 1 GB", 5*time.Second, func() (bool, string) { n := poolTotal(); return n == total+1<<30, fmt.Sprint(n) })

	// 데이터 선물하기 under the carriers' rules (#24, #39): the demo's
	// children are minors, who only receive — the child's card says so —;
	// the owner gives 300 MB of its month to 자녀1; both limits move in the
	// engine at once.
	var fm struct {
		Members []struct {
			CustomerID int64  `json:"customerId"`
			Name       string `json:"name"`
		} `json:"members"`
	}
	sys.Call(t, ownerTok, http.MethodGet, fmt.Sprintf("/families/%d/members", fam), nil, &fm)
	var sibling int64
	for _, m := range fm.Members {
		if m.Name == "자녀2" {
			sibling = m.CustomerID
		}
	}
	for id, limit := range map[int64]int64{sys.Owner.ID: 2 << 30, sys.Owner2.ID: 1 << 30, child: 1 << 30, sibling: 1 << 30} {
		sys.Call(t, ownerTok, http.MethodPatch, fmt.Sprintf("/families/%d/members/%d/policies", fam, id),
			map[string]any{"set": map[string]string{"LIMIT:DATA:MONTHLY": strconv.FormatInt(limit, 10)}}, nil)
	}
	browsertest.Run(t, kid, "open the dashboard (gift)", chromedp.Navigate(sys.URL+"/app/#/dashboard"))
	waitJS(t, kid, "a minor only receives", 10*time.Second, `!!document.querySelector('#gift-minor')?.textContent.includes('미성년자는 데이터 선물을 받을 수만 있어요')`,
		`document.querySelector('#main')?.innerText`)
	browsertest.Run(t, owner, "open the dashboard (gift)", chromedp.Navigate(sys.URL+"/app/#/dashboard"))
	waitJS(t, owner, "the gift card", 10*time.Second, `!document.querySelector('#gift')?.hidden && document.querySelector('#gift-from')?.selectedOptions[0]?.textContent === '아빠' && !!document.querySelector('#gift-rules')`,
		`document.querySelector('#main')?.innerText`)
	// An owner giving another member's data is told whose limit it comes
	// out of (#38: "이번 달 내 한도에서 빠집니다" for a gift from another).
	pick := func(from int64) string {
		return fmt.Sprintf(`(() => { const f = document.querySelector('#gift-from'); f.value = '%d'; f.dispatchEvent(new Event('change'));
			document.querySelector('#gift-to').value = '%d'; document.querySelector('#gift-amount').value = '%d'; })()`, from, child, 300*mib)
	}
	// Filled and sent in the page, again on a card a live update drew
	// anew (the policies above are still arriving), until it asks.
	ask := func(what string, from int64, want string) {
		t.Helper()
		waitJS(t, owner, what, 10*time.Second, fmt.Sprintf(`(() => {
			if (document.querySelector('#gift .confirm')?.textContent.includes(%q)) return true;
			const s = document.querySelector('#gift-send');
			if (s && !s.dataset.tapped && !document.querySelector('#gift .confirm')) { %s; s.dataset.tapped = '1'; s.click(); }
			return false; })()`, want, pick(from)), `document.querySelector('#gift')?.innerText`)
	}
	ask("whose limit, named", sys.Owner2.ID, "엄마님의 데이터 300 MB를 자녀1님에게 선물할까요? 엄마님의 이번 달 한도에서 빠집니다.")
	// Declined. A policy above arriving late changes the family's shape,
	// and the card, drawn anew, drops the question too.
	waitJS(t, owner, "not that one: the question gone", 5*time.Second,
		`(() => { document.querySelector('#gift .confirm-no')?.click(); return !document.querySelector('#gift .confirm'); })()`,
		`document.querySelector('#gift')?.innerText`)
	browsertest.Run(t, owner, "send again", chromedp.Evaluate(`document.querySelector('#gift-send') && delete document.querySelector('#gift-send').dataset.tapped`, nil))
	ask("the gift asked about", sys.Owner.ID, "자녀1님에게 데이터 300 MB를 선물할까요")
	browsertest.CheckAccessibility(t, owner, "app-gift")
	browsertest.Run(t, owner, "show the gift card", chromedp.Evaluate(`document.querySelector('#gift')?.scrollIntoView()`, nil))
	browsertest.Screenshot(t, owner, "app-gift-confirm")
	// The receiver watches its inbox: the gift arrives there, in words,
	// with the giver's name (#38: a gift sent no notification).
	browsertest.Run(t, kid, "open the inbox (gift)", chromedp.Navigate(sys.URL+"/app/#/inbox"))
	waitJS(t, kid, "the inbox", 5*time.Second, `!!document.querySelector('#notes')`, `document.querySelector('#main')?.innerText`)
	waitLive(t, kid)
	start = time.Now()
	// Confirmed; asked again if the card was drawn anew meanwhile (above).
	waitJS(t, owner, "confirm the gift", 10*time.Second, fmt.Sprintf(`(() => {
		const y = document.querySelector('#gift .confirm-yes');
		if (y) { y.click(); return true; }
		const s = document.querySelector('#gift-send');
		if (s && !document.querySelector('#gift .confirm')) { %s; s.click(); }
		return false; })()`, pick(sys.Owner.ID)), `document.querySelector('#gift')?.innerText`)
	waitJS(t, owner, "the gift said in its card", 5*time.Second, `!!document.querySelector('#gift-note')?.textContent.includes('자녀1님에게 300 MB를 선물했어요')`,
		`document.querySelector('#gift')?.innerText`)
	t.Logf("gift confirmed → said on the owner's phone: %v", time.Since(start).Round(time.Millisecond))
	waitJS(t, kid, "the gift in the receiver's open inbox", 10*time.Second,
		`[...document.querySelectorAll('#notes li.note[data-kind=DATA_GIFTED]')].some((li) => li.textContent.includes('자녀1님에게 데이터 선물 도착') &&
			li.textContent.includes('아빠님이 데이터 300 MB를 선물했습니다. 이번 달에 그만큼 더 쓸 수 있습니다.'))`,
		`document.querySelector('#notes')?.innerText`)
	t.Logf("gift confirmed → in the receiver's inbox: %v", time.Since(start).Round(time.Millisecond))
	if n := countJS(t, kid, `document.querySelectorAll('#notes li.note[data-kind=DATA_GIFTED]').length`); n != 1 {
		t.Errorf("the receiver sees %d gift notifications, want its own 1", n)
	}
	browsertest.Screenshot(t, kid, "app-gift-received")
	// The giver's confirmation is in its inbox; owners read both.
	waitAPI(t, "the giver's confirmation in the inbox", 5*time.Second, func() (bool, string) {
		var inbox struct {
			Items []struct {
				Kind     string `json:"kind"`
				MemberID int64  `json:"memberId"`
				Body     string `json:"body"`
			} `json:"items"`
		}
		sys.Call(t, ownerTok, http.MethodGet, fmt.Sprintf("/families/%d/notifications", fam), nil, &inbox)
		for _, n := range inbox.Items {
			if n.Kind == "DATA_GIFTED" && n.MemberID == sys.Owner.ID && n.Body == "자녀1님에게 데이터 300 MB를 선물했습니다. 이번 달에 쓸 수 있는 데이터가 그만큼 줄었습니다." {
				return true, ""
			}
		}
		return false, fmt.Sprint(inbox.Items)
	})
	month := time.Now().In(zone).Format("200601")
	if r := rules(); r["LIMIT:DATA:GIFT:"+month] != strconv.Itoa(300*mib) {
		t.Errorf("the receiver's rules after the gift: %v", r)
	}
	var giver struct {
		Rules map[string]string `json:"rules"`
	}
	sys.Call(t, ownerTok, http.MethodGet, fmt.Sprintf("/families/%d/members/%d/policies", fam, sys.Owner.ID), nil, &giver)
	if giver.Rules["LIMIT:DATA:GIFT:"+month] != strconv.Itoa(-300*mib) {
		t.Errorf("the giver's rules after the gift: %v", giver.Rules)
	}

	// Settings (language switch) and English.
	browsertest.Run(t, kid, "open the settings", chromedp.Navigate(sys.URL+"/app/#/settings"))
	waitJS(t, kid, "settings", 5*time.Second, `!!document.querySelector('#logout')`, `document.querySelector('#main')?.innerText`)
	// The role in the viewer's words, not the API's (#24: "아빠 (OWNER)").
	waitJS(t, kid, "the role in Korean", 5*time.Second, `document.querySelector('#main')?.innerText.includes('(구성원)') && !document.querySelector('#main')?.innerText.includes('MEMBER')`,
		`document.querySelector('#main')?.innerText`)
	browsertest.CheckAccessibility(t, kid, "app-settings")
	browsertest.Run(t, kid, "switch to English", chromedp.Click("#lang", chromedp.ByID))
	waitJS(t, kid, "English", 5*time.Second, `document.documentElement.lang === 'en' && document.querySelector('#nav-dashboard')?.textContent === 'Dashboard'`,
		`document.documentElement.lang + ' ' + document.querySelector('#nav')?.innerText`)
	browsertest.Run(t, kid, "log out", chromedp.Click("#logout", chromedp.ByID))
	waitJS(t, kid, "the login screen", 5*time.Second, `location.hash === '#/login' && !!document.querySelector('#login-id')`, `location.hash`)
}

// TestFamilyAppRender2000 measures the first dashboard render on the
// all-in-one with 2,000 families and the simulator running (goal ≤ 1 s,
// judged on the median of five loads).
func TestFamilyAppRender2000(t *testing.T) {
	sys := browsertest.StartSystem(t, browsertest.WithEnv("DPCS_DEMO_FAMILIES", "2000"), browsertest.WithEnv("DPCS_SIMULATOR_RATE", "200"))
	b := browsertest.New(t)
	owner := front(t, b.Page(t, browsertest.Phone))
	browsertest.Run(t, owner, "open the app", chromedp.Navigate(sys.URL+"/app/"), chromedp.WaitVisible("#login-id", chromedp.ByID))
	login(t, owner, sys.Owner.Phone, sys.Password)
	// The machine is shared: judge the median of 5 loads, log each with where
	// its time went (the app's files, the dashboard call).
	var times []time.Duration
	for i := range 5 {
		browsertest.Run(t, owner, "reload the dashboard", chromedp.Reload())
		waitJS(t, owner, "the dashboard renders", 5*time.Second, `performance.getEntriesByName('dpcs-dashboard').length > 0`, `document.querySelector('#main')?.innerText`)
		d := renderTime(t, owner)
		var parts struct{ Files, API float64 }
		browsertest.Run(t, owner, "read the load's parts", chromedp.Evaluate(`(() => {
			const rs = performance.getEntriesByType('resource');
			const files = Math.max(0, ...rs.filter((e) => new URL(e.name).pathname.startsWith('/app/')).map((e) => e.responseEnd));
			const api = rs.filter((e) => /\/families\/\d+$/.test(new URL(e.name).pathname)).map((e) => e.duration)[0] || 0;
			return {Files: files, API: api};
		})()`, &parts))
		t.Logf("2,000 families, simulator at 200/s: first dashboard render #%d: %v (app files loaded by %.0f ms, GET /families/{id} took %.0f ms)", i+1, d, parts.Files, parts.API)
		times = append(times, d)
	}
	slices.Sort(times)
	t.Logf("first dashboard render: median %v, worst %v", times[len(times)/2], times[len(times)-1])
	if med, bound := times[len(times)/2], testenv.LatencyBound(t, time.Second); med > bound {
		t.Errorf("first dashboard render: median %v of %v, want ≤ %v", med, times, bound)
	}
}

// pageFilesJS lists the paths under /app/ the page loaded (the document,
// styles, scripts, icons, manifest), each once.
const pageFilesJS = `[...new Set([...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')]
	.map((e) => new URL(e.name).pathname).filter((p) => p.startsWith('/app/')))]`

// pageWeight sums the bytes the server sends for paths to a browser that
// accepts gzip: bodies as compressed on the wire.
func pageWeight(t *testing.T, base string, paths []string) int {
	t.Helper()
	cl := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	total := 0
	for _, p := range paths {
		req, err := http.NewRequest(http.MethodGet, base+p, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept-Encoding", "gzip, deflate, br")
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", p, res.StatusCode, err)
		}
		total += len(b)
	}
	return total
}

// renderTime reads the time from navigation start to the app's first
// dashboard render (the performance mark the dashboard sets).
func renderTime(t *testing.T, ctx context.Context) time.Duration {
	t.Helper()
	waitJS(t, ctx, "the dashboard render mark", 5*time.Second, `performance.getEntriesByName('dpcs-dashboard').length > 0`, `location.hash`)
	var ms float64
	browsertest.Run(t, ctx, "read the render mark", chromedp.Evaluate(`performance.getEntriesByName('dpcs-dashboard')[0].startTime`, &ms))
	return time.Duration(ms * float64(time.Millisecond)).Round(time.Millisecond)
}

type dashboard struct {
	Pool struct {
		RemainingBytes int64 `json:"remainingBytes"`
	} `json:"pool"`
	Members []struct {
		CustomerID       int64  `json:"customerId"`
		MonthlyUsedBytes int64  `json:"monthlyUsedBytes"`
		Status           string `json:"status"`
	} `json:"members"`
}

func (d dashboard) member(id int64) (m struct {
	CustomerID       int64  `json:"customerId"`
	MonthlyUsedBytes int64  `json:"monthlyUsedBytes"`
	Status           string `json:"status"`
}) {
	for _, x := range d.Members {
		if x.CustomerID == id {
			return x
		}
	}
	return m
}

// front brings the tab to the front of its browser: a background tab draws
// no frames (a screenshot waits for one forever) and has its timers throttled.
func front(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	browsertest.Run(t, ctx, "bring the tab to the front", page.BringToFront())
	return ctx
}

// apiUnreachable makes every API request of the tab fail as a network
// error does (fetch rejects with a TypeError) from the next document on,
// while the app's own files still load (from the service worker's cache or
// the server); the returned function ends it.
func apiUnreachable(t *testing.T, ctx context.Context) func() {
	t.Helper()
	var id page.ScriptIdentifier
	browsertest.Run(t, ctx, "cut the API off", chromedp.ActionFunc(func(ctx context.Context) error {
		var err error
		id, err = page.AddScriptToEvaluateOnNewDocument(`(() => {
			const real = window.fetch.bind(window);
			window.dpcsAPIDown = true;
			window.fetch = (input, init) => {
				const u = new URL(typeof input === 'string' ? input : input.url, location.href);
				if (window.dpcsAPIDown && !u.pathname.startsWith('/app/')) return Promise.reject(new TypeError('Failed to fetch'));
				return real(input, init);
			};
		})()`).Do(ctx)
		return err
	}))
	return func() { // for the next documents and the open one
		browsertest.Run(t, ctx, "reconnect the API", page.RemoveScriptToEvaluateOnNewDocument(id),
			chromedp.Evaluate(`window.dpcsAPIDown = false`, nil))
	}
}

// login fills the login form and waits for the dashboard.
func login(t *testing.T, ctx context.Context, id, password string) {
	t.Helper()
	browsertest.Run(t, ctx, "log in as "+id,
		chromedp.SetValue("#login-id", id, chromedp.ByID),
		chromedp.SetValue("#login-password", password, chromedp.ByID),
		chromedp.Click("#login-submit", chromedp.ByID))
	// 30 s: a password hash and a first dashboard under -race on a loaded
	// machine (the 2,000-family system's login took more than 10 s once).
	waitJS(t, ctx, "the dashboard after login as "+id, 30*time.Second, `!!document.querySelector('#pool-remaining')`,
		`location.hash + ' ' + document.querySelector('#main')?.innerText`)
}

// waitLive waits until the page's live stream is connected.
func waitLive(t *testing.T, ctx context.Context) {
	t.Helper()
	waitJS(t, ctx, "the live stream connected", 10*time.Second, `document.querySelector('#live')?.classList.contains('live-on')`,
		`document.querySelector('#live')?.textContent`)
}

// waitJS polls the boolean expression cond in the page until it holds or
// timeout passes; then it fails, showing what the expression seen evaluated to.
func waitJS(t *testing.T, ctx context.Context, what string, timeout time.Duration, cond, seen string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		if err := chromedp.Run(ctx, chromedp.Evaluate(`!!(`+cond+`)`, &ok)); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var got any
			_ = chromedp.Run(ctx, chromedp.Evaluate(seen, &got))
			t.Fatalf("%s: not seen within %v; saw %v", what, timeout, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func countJS(t *testing.T, ctx context.Context, expr string) int {
	t.Helper()
	var n int
	browsertest.Run(t, ctx, "count "+expr, chromedp.Evaluate(expr, &n))
	return n
}

// waitAPI polls check until it reports true or timeout passes.
func waitAPI(t *testing.T, what string, timeout time.Duration, check func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, seen := check()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen within %v; saw %s", what, timeout, seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// useData publishes n usage events of size bytes for the member to the
// usage topic, as a network would.
func useData(t *testing.T, kafkaAddr string, fam, cust int64, app string, n int, size int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for range n {
		e := envelope.New(envelope.NewID(envelope.PrefixEvent), time.Now(), envelope.UsagePayload{FamilyID: fam, CustomerID: cust, AppID: app, BytesUsed: size})
		rec, err := kafkarecord.New(envelope.TopicUsageEvents, e)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = cl.ProduceSync(ctx, rec).FirstErr()
		cancel()
		if err != nil {
			t.Fatalf("produce usage: %v", err)
		}
	}
}

// hasRoute reports whether the API's OpenAPI document has the path.
func hasRoute(t *testing.T, base, path string) bool {
	t.Helper()
	res, err := http.Get(base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var doc struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	if err := json.NewDecoder(res.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	_, ok := doc.Paths[path]
	return ok
}

// awaitPromise has chromedp.Evaluate wait for the promise the expression
// returns.
func awaitPromise(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }
