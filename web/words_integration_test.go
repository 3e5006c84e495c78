//go:build integration

package web_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv/browsertest"
	"github.com/dabom/dpcs/internal/testenv/readable"
)

// TestWordsPeopleRead walks the family app's and the back office's screens
// for a family that did most of what families do — used apps the catalog
// knows and one it does not, was blocked by an app, a window and a parent,
// asked for data, minutes and an app's time (approved, declined, pending),
// got a gift, an exception and a top-up, passed an alert level, had a
// password reset and a locked login, got a weekly summary — and a dead
// letter: no screen shows a package id, a constraint key, a signed byte
// count, a decision code, an ISO time or an English sentence (#38;
// readable.Problems). What is read is what a person reads: the visible
// text, the labels a screen reader reads, and the values of visible
// fields. Left out, as meant to show ids and keys: the console's app
// catalog (an operator names apps by their ids there) and the raw key
// editor folded under "고급".
func TestWordsPeopleRead(t *testing.T) {
	sys := browsertest.StartSystem(t)
	fam, child, child2 := sys.FamilyID, sys.Child.ID, sys.Child2.ID
	owner, admin := sys.Token(t, sys.Owner), sys.Token(t, sys.Admin)
	kidTok := sys.Token(t, sys.Child)
	call := func(tok, method, path string, body any, want ...int) {
		t.Helper()
		sys.Call(t, tok, method, path, body, nil, want...)
	}
	famPath := fmt.Sprintf("/families/%d", fam)
	policy := func(cid int64, set map[string]string) {
		call(owner, http.MethodPatch, fmt.Sprintf("%s/members/%d/policies", famPath, cid), map[string]any{"set": set})
	}

	// Use: known apps and one the catalog does not know; 6 of the 10 MB,
	// so the family passes its 50 % alert level.
	useData(t, sys.KafkaAddr, fam, child, "com.youtube.app", 3, mib)
	useData(t, sys.KafkaAddr, fam, child, "com.unknown.game", 2, mib)
	useData(t, sys.KafkaAddr, fam, sys.Owner.ID, "com.kakao.talk", 1, mib)
	waitAPI(t, "6 MB judged", 30*time.Second, func() (bool, string) {
		var d dashboard
		sys.Call(t, owner, http.MethodGet, famPath, nil, &d)
		return d.Pool.RemainingBytes <= 4*mib, fmt.Sprint(d.Pool.RemainingBytes)
	})
	// Blocks: an app, a parent's block, a window (not now) and categories.
	zone, err := time.LoadLocation("Asia/Seoul")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().In(zone)
	policy(child, map[string]string{"BLOCK:APP:com.youtube.app": "1", "BLOCK:APP:com.unknown.game": "1", "LIMIT:DATA:MONTHLY": strconv.Itoa(100 * mib),
		"LIMIT:DATA:DAILY": strconv.Itoa(50 * mib), "ALLOW:CATEGORY:MESSAGING": "1", "BLOCK:CATEGORY:GAME": "1",
		"BLOCK:TIME:숙제": fmt.Sprintf("%s-%s", now.Add(3*time.Hour).Format("1504"), now.Add(4*time.Hour).Format("1504"))})
	useData(t, sys.KafkaAddr, fam, child, "com.youtube.app", 1, 1024) // blocked: CUSTOMER_BLOCKED of an app
	policy(child2, map[string]string{"BLOCK:ACCESS": "1", "LIMIT:DATA:MONTHLY": strconv.Itoa(200 * mib)})
	useData(t, sys.KafkaAddr, fam, child2, "com.netflix.mediaclient", 1, 1024)
	// A gift, an exception, a top-up and a plan change.
	policy(sys.Owner2.ID, map[string]string{"LIMIT:DATA:MONTHLY": strconv.Itoa(1024 * mib)})
	call(owner, http.MethodPost, famPath+"/gifts", map[string]any{"fromCustomerId": sys.Owner2.ID, "toCustomerId": child, "amountBytes": 100 * mib}, http.StatusCreated)
	call(owner, http.MethodPost, fmt.Sprintf("%s/members/%d/exceptions", famPath, child), map[string]any{"kind": "APP", "appId": "com.unknown.game", "minutes": 30})
	call(owner, http.MethodPost, famPath+"/topups", map[string]any{"offerId": "100MB"}, http.StatusCreated)
	// Requests of every kind: one approved, one declined, two waiting.
	var reqs []int64
	ask := func(body map[string]any) {
		var r struct{ ID int64 }
		sys.Call(t, kidTok, http.MethodPost, famPath+"/data-requests", body, &r, http.StatusCreated)
		reqs = append(reqs, r.ID)
	}
	ask(map[string]any{"amountBytes": 10 * mib, "message": "숙제 영상"})
	ask(map[string]any{"kind": "TIME", "minutes": 15})
	call(owner, http.MethodPost, fmt.Sprintf("%s/data-requests/%d/approve", famPath, reqs[0]), map[string]any{"grant": "DAY"})
	call(owner, http.MethodPost, fmt.Sprintf("%s/data-requests/%d/decline", famPath, reqs[1]), map[string]any{"reason": "내일 하자"})
	ask(map[string]any{"kind": "APP", "appId": "com.youtube.app", "minutes": 30, "message": "노래 들을게요"})
	ask(map[string]any{"kind": "APP", "appId": "com.unknown.game", "minutes": 15})
	// A password reset, a locked login (the other parent's: a lock is the
	// member's, whatever login was typed, and the blocked child logs in
	// below), a member added and removed.
	call(owner, http.MethodPost, fmt.Sprintf("%s/members/%d/password", famPath, child2), map[string]string{"password": "summer camp 2026"}, http.StatusNoContent)
	for range 10 {
		sys.Call(t, "", http.MethodPost, "/auth/token", map[string]string{"login": sys.Owner2.Phone, "password": "wrong guess"}, nil,
			http.StatusUnauthorized, http.StatusTooManyRequests)
	}
	var added struct {
		CustomerID int64 `json:"customerId"`
	}
	sys.Call(t, owner, http.MethodPost, famPath+"/members", map[string]any{"name": "할머니"}, &added, http.StatusCreated)
	call(owner, http.MethodDelete, fmt.Sprintf("%s/members/%d", famPath, added.CustomerID), nil, http.StatusNoContent)
	// A long name must not widen a phone's page (#38: 730 px).
	call(owner, http.MethodPost, famPath+"/members", map[string]any{"name": "김수한무거북이와두루미삼천갑자동방삭치치카포사리사리센타워리워리세브리깡무두셀라구름이허리케인담벼락"},
		http.StatusCreated)
	call(admin, http.MethodPut, fmt.Sprintf("/admin/families/%d/plan", fam), map[string]any{"planBytes": 20 * mib})
	call(admin, http.MethodPost, "/admin/policy-templates", map[string]any{"name": "게임 없는 평일", "type": "LIMIT", "requireRole": "MEMBER", "active": true,
		"defaultRules": map[string]string{"BLOCK:CATEGORY:GAME": "1", "BLOCK:APP:com.roblox.client": "1", "LIMIT:DATA:DAILY": strconv.Itoa(300 * mib)}},
		http.StatusCreated)
	// The summary sums the persisted events: wait for the write-behind
	// (asked before it, the week read "0 B" for everyone).
	waitAPI(t, "the child's use and block persisted", 30*time.Second, func() (bool, string) {
		var u struct{ AllowedBytes, Blocked int64 }
		sys.Call(t, owner, http.MethodGet, fmt.Sprintf("%s/members/%d/usage", famPath, child), nil, &u)
		return u.AllowedBytes >= 5*mib && u.Blocked >= 1, fmt.Sprintf("%+v", u)
	})
	// This week's summary (the job sends last week's on Mondays: asked for
	// this one here).
	from := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, zone).AddDate(0, 0, -(int(now.Weekday())+6)%7)
	if sys.Weekly == nil {
		t.Fatal("the all-in-one runs no weekly summaries")
	}
	if sent, err := sys.Weekly.Family(context.Background(), fam, from, from.AddDate(0, 0, 7), "this-week"); err != nil || !sent {
		t.Fatalf("weekly summary: sent %v, %v", sent, err)
	}
	// A record no consumer can read: a dead letter with a consumer's reason.
	deadLetter(t, sys.KafkaAddr)
	waitAPI(t, "the block notifications stored", 30*time.Second, func() (bool, string) {
		var page struct {
			Items []struct{ Kind string } `json:"items"`
		}
		sys.Call(t, owner, http.MethodGet, famPath+"/notifications?limit=100", nil, &page)
		kinds := map[string]int{}
		for _, n := range page.Items {
			kinds[n.Kind]++
		}
		return kinds["CUSTOMER_BLOCKED"] >= 2 && kinds["THRESHOLD_ALERT"] >= 1 && kinds["DATA_REQUEST_ANSWERED"] >= 0 && kinds["WEEKLY_SUMMARY"] == 1,
			fmt.Sprint(kinds)
	})

	var problems []string
	// The screens kept as screenshots (make screenshots).
	shots := map[string]string{"app: owner's inbox": "app-inbox-weekly", "app: owner's dashboard": "app-dashboard-requests",
		"app: an unknown app's screen": "app-app-unknown", "app: the blocked child's block screen": "app-block-parent",
		"console: search by a child's phone": "console-search-matched", "console: the family, the child's policies": "console-family-logins",
		"console: the family's audit log": "console-audit-words", "console: dead letters": "console-dead-letters-words"}
	read := func(ctx context.Context, screen, ready string) {
		t.Helper()
		waitJS(t, ctx, screen, 15*time.Second, ready, `location.hash + ' ' + document.querySelector('main')?.innerText`)
		var texts []string
		browsertest.Run(t, ctx, "read "+screen, chromedp.Evaluate(readJS, &texts))
		for _, s := range texts {
			for _, p := range readable.Problems(s) {
				problems = append(problems, fmt.Sprintf("%s: %s", screen, p))
			}
		}
		t.Logf("%s: %d texts read", screen, len(texts))
		browsertest.CheckAccessibility(t, ctx, screen)
		if name := shots[screen]; name != "" {
			browsertest.Screenshot(t, ctx, name)
		}
		var wide struct{ Page, Window int }
		browsertest.Run(t, ctx, "measure "+screen, chromedp.Evaluate(`({Page: document.documentElement.scrollWidth, Window: window.innerWidth})`, &wide))
		if wide.Page > wide.Window {
			problems = append(problems, fmt.Sprintf("%s: the page is %d px wide in a %d px window", screen, wide.Page, wide.Window))
		}
	}

	// The family app, on each person's phone.
	phone := func(who browsertest.Login, password string) context.Context {
		ctx := front(t, browsertest.New(t).Page(t, browsertest.Phone))
		browsertest.Run(t, ctx, "open the app", chromedp.Navigate(sys.URL+"/app/"), chromedp.WaitVisible("#login-id", chromedp.ByID))
		login(t, ctx, strconv.FormatInt(who.ID, 10), password)
		return ctx
	}
	goTo := func(ctx context.Context, hash string) {
		browsertest.Run(t, ctx, "open "+hash, chromedp.Navigate(sys.URL+"/app/"+hash))
	}
	dad := phone(sys.Owner, sys.Password)
	read(dad, "app: owner's dashboard", `document.querySelectorAll('#members li.member').length === 5 && !!document.querySelector('#requests li')`)
	goTo(dad, fmt.Sprintf("#/usage/%d", child))
	read(dad, "app: child's usage", `!!document.querySelector('#chart-app')`)
	goTo(dad, "#/inbox")
	read(dad, "app: owner's inbox", `document.querySelectorAll('#notes li.note').length >= 5 && !!document.querySelector('#notes li[data-kind=WEEKLY_SUMMARY] table')`)
	// An alert an owner can act on (#38): the low-data alert offers a top-up.
	waitJS(t, dad, "the alert's top-up", 5*time.Second, `!!document.querySelector('#notes li[data-kind=THRESHOLD_ALERT] [id^=note-topup-]')`,
		`document.querySelector('#notes li[data-kind=THRESHOLD_ALERT]')?.innerText`)
	// The week's table on a phone: an amount and a count on one line each
	// ("0 B" was drawn as "0" over "B", its headers a letter per line).
	var tall []string
	// (The lines of a cell's text, not the cell's height: a row is as tall
	// as a long name in it.)
	browsertest.Run(t, dad, "measure the week's table", chromedp.Evaluate(`[...document.querySelectorAll('table.week td, table.week thead th')].map((e) => {
			const r = document.createRange(); r.selectNodeContents(e);
			return [e.textContent, new Set([...r.getClientRects()].map((x) => Math.round(x.top))).size];
		}).filter(([, lines]) => lines > 1).map(([text, lines]) => text + ': ' + lines + ' lines')`, &tall))
	for _, s := range tall {
		problems = append(problems, "app: owner's inbox: the week's table squeezed: "+s)
	}
	// Every request kind is answered from the inbox and from its push (#38):
	// the app requests waiting here — one approved from its inbox item, the
	// other declined as the notification's button does (js/answer.js, run
	// in the page: headless Chromium reaches no push service).
	appReq, pushReq := reqs[3], reqs[2] // com.unknown.game's, YouTube's
	waitJS(t, dad, "the app requests answerable in the inbox", 5*time.Second,
		fmt.Sprintf(`!!document.querySelector('#inbox-approve-%d') && !!document.querySelector('#inbox-decline-%d') && !!document.querySelector('#inbox-decline-%d')`, appReq, appReq, pushReq),
		`document.querySelector('#notes')?.innerText`)
	browsertest.Run(t, dad, "approve the app's time from the inbox", chromedp.Evaluate(fmt.Sprintf(`document.querySelector('#inbox-approve-%d').click()`, appReq), nil))
	var answered string
	browsertest.Run(t, dad, "decline YouTube's time as the notification does",
		chromedp.Evaluate(`new Promise((ok, fail) => { const s = document.createElement('script'); s.src = '/app/js/answer.js';
			s.onload = () => ok(true); s.onerror = fail; document.head.append(s); })`, nil, awaitPromise),
		chromedp.Evaluate(fmt.Sprintf(`self.dpcsAnswer({familyId: %d, requestId: %d}, 'decline')`, fam, pushReq), &answered, awaitPromise))
	if answered != "declined" {
		t.Errorf("YouTube's request declined from the notification: %q", answered)
	}
	waitAPI(t, "the app requests answered", 10*time.Second, func() (bool, string) {
		var a, p struct{ Status string }
		sys.Call(t, owner, http.MethodGet, fmt.Sprintf("%s/data-requests/%d", famPath, appReq), nil, &a)
		sys.Call(t, owner, http.MethodGet, fmt.Sprintf("%s/data-requests/%d", famPath, pushReq), nil, &p)
		return a.Status == "APPROVED" && p.Status == "DECLINED", a.Status + " " + p.Status
	})
	goTo(dad, fmt.Sprintf("#/controls/%d", child))
	read(dad, "app: controls of the child", `!!document.querySelector('#apps') && !!document.querySelector('#member-admin li')`)
	// A member's name and its buttons on one line each, on a phone (a
	// squeezed "자녀1" was drawn a letter per line, "삭제" in two).
	var squeezed []string
	browsertest.Run(t, dad, "measure the members' names", chromedp.Evaluate(`(() => {
		const tall = (e, lines) => e.offsetHeight > lines * parseFloat(getComputedStyle(e).fontSize);
		return [...document.querySelectorAll('#member-admin li')].flatMap((li) => [
			...[...li.querySelectorAll('span')].filter((s) => s.textContent.length <= 8 && tall(s, 2)).map((s) => 'name ' + s.textContent + ': ' + s.offsetHeight + ' px'),
			...[...li.querySelectorAll('button')].filter((b) => tall(b, 2.6)).map((b) => 'button ' + b.textContent + ': ' + b.offsetHeight + ' px')]);
	})()`, &squeezed))
	for _, s := range squeezed {
		problems = append(problems, "app: controls of the child: squeezed: "+s)
	}
	goTo(dad, "#/settings")
	read(dad, "app: owner's settings", `!!document.querySelector('#logout')`)
	kid := phone(sys.Child, sys.Password)
	read(kid, "app: child's dashboard", `!!document.querySelector('#my-rules-list')`)
	goTo(kid, "#/app/com.youtube.app")
	read(kid, "app: an app's block screen", `!!document.querySelector('#app-block-why')`)
	goTo(kid, "#/app/com.unknown.game")
	read(kid, "app: an unknown app's screen", `!!document.querySelector('#app-block-h')?.textContent`)
	goTo(kid, "#/inbox")
	read(kid, "app: child's inbox", `document.querySelectorAll('#notes li.note').length >= 2`)
	goTo(kid, "#/usage")
	read(kid, "app: child's own usage", `!!document.querySelector('#chart-app')`)
	sister := front(t, browsertest.New(t).Page(t, browsertest.Phone))
	// A locked login says who can help (#38: lockout did not say that a
	// parent can reset the password).
	browsertest.Run(t, sister, "try the locked login", chromedp.Navigate(sys.URL+"/app/"), chromedp.WaitVisible("#login-id", chromedp.ByID),
		chromedp.SetValue("#login-id", sys.Owner2.Phone, chromedp.ByID), chromedp.SetValue("#login-password", "another guess", chromedp.ByID),
		chromedp.Click("#login-submit", chromedp.ByID))
	read(sister, "app: a locked login", `document.querySelector('#login-help')?.textContent.includes('보호자에게 재설정을 부탁하세요') && !!document.querySelector('#login-error')?.textContent`)
	browsertest.Run(t, sister, "log in as the blocked child",
		chromedp.SetValue("#login-id", strconv.FormatInt(child2, 10), chromedp.ByID), chromedp.SetValue("#login-password", "summer camp 2026", chromedp.ByID),
		chromedp.Click("#login-submit", chromedp.ByID))
	read(sister, "app: the blocked child's block screen", `location.hash === '#/block' && !!document.querySelector('#block-reason')`)

	// The back office, on a desktop.
	desk := front(t, browsertest.New(t).Page(t, browsertest.Desktop))
	console := sys.URL + "/console/"
	browsertest.Run(t, desk, "open the console", chromedp.Navigate(console), chromedp.WaitVisible("#login-name", chromedp.ByID),
		chromedp.SendKeys("#login-name", sys.Admin.Phone, chromedp.ByID), chromedp.SendKeys("#login-password", sys.Password, chromedp.ByID),
		chromedp.Click("#login-form button[type=submit]", chromedp.ByQuery))
	waitJS(t, desk, "signed in", 10*time.Second, `!!document.querySelector('[data-screen=search]')`, `document.body.innerText`)
	open := func(hash, screen, ready string) {
		browsertest.Run(t, desk, "open "+hash, chromedp.Navigate(console+hash))
		read(desk, screen, ready)
	}
	open("#/search?q="+sys.Child.Phone, "console: search by a child's phone", `!!document.querySelector('#search-results [data-matched]')`)
	open(fmt.Sprintf("#/family/%d?member=%d", fam, child), "console: the family, the child's policies",
		`!!document.querySelector('#policy-form') && !!document.querySelector('#notes-list') && document.querySelectorAll('tr[data-member]').length === 5`)
	// The agent sees the logins: the locked one (#38).
	waitJS(t, desk, "the locked login shown", 5*time.Second, fmt.Sprintf(`!!document.querySelector('td[data-login="%d"] .bad-text')`, sys.Owner2.ID),
		fmt.Sprintf(`document.querySelector('td[data-login="%d"]')?.innerText`, sys.Owner2.ID))
	open(fmt.Sprintf("#/family/%d?member=%d", fam, sys.Owner2.ID), "console: the giver's policies", `!!document.querySelector('#policy-form')`)
	open("#/templates", "console: templates", `!!document.querySelector('[data-edit]')`)
	open(fmt.Sprintf("#/audit?familyId=%d", fam), "console: the family's audit log", `document.querySelectorAll('tr[data-audit]').length >= 10`)
	open("#/audit", "console: the audit log", `document.querySelectorAll('tr[data-audit]').length >= 10`)
	open("#/operations", "console: operations", `!!document.querySelector('#ops-total')?.textContent`)
	// Operations counts the dead letter and its link shows it (#38: "보기"
	// showed "실패 메시지가 없습니다" while operations counted two).
	open("#/operations", "console: operations, the dead letters counted", `!!document.querySelector('a[href="#/dead-letters?topic=usage-events.DLT"]')`)
	browsertest.Run(t, desk, "follow the dead letters' count", chromedp.Evaluate(`document.querySelector('a[href="#/dead-letters?topic=usage-events.DLT"]').click()`, nil))
	read(desk, "console: dead letters", `!!document.querySelector('tr[data-record]')`)
	// "보기" on the same address reads the records again.
	browsertest.Run(t, desk, "mark the list, then 보기", chromedp.Evaluate(`(() => { document.querySelector('tr[data-record]').dataset.seen = '1';
		document.querySelector('#main .screen form button[type=submit]').click(); })()`, nil))
	waitJS(t, desk, "the records read again", 10*time.Second, `!!document.querySelector('tr[data-record]') && !document.querySelector('tr[data-record][data-seen]')`,
		`document.querySelector('main')?.innerText`)
	// Apps seen in traffic the catalog does not name are listed to be named (#38).
	browsertest.Run(t, desk, "open the catalog", chromedp.Navigate(console+"#/catalog"))
	waitJS(t, desk, "the unknown app listed", 15*time.Second, `!!document.querySelector('#unknown-apps tr[data-unknown-app="com.unknown.game"]')`,
		`document.querySelector('#unknown-apps')?.innerText`)
	browsertest.CheckAccessibility(t, desk, "console: the app catalog")
	// A session ended elsewhere says why on the sign-in screen (#38: a blank
	// sign-in without a word): the admin's refresh token is revoked and its
	// access token spoilt, as an expired one is refused.
	var refresh string
	browsertest.Run(t, desk, "read the console's session", chromedp.Evaluate(`JSON.parse(sessionStorage.getItem('dpcs.console.session')).refreshToken`, &refresh))
	sys.Call(t, "", http.MethodPost, "/auth/logout", map[string]string{"refreshToken": refresh}, nil, http.StatusNoContent)
	browsertest.Run(t, desk, "spoil the access token", chromedp.Evaluate(`(() => { const s = JSON.parse(sessionStorage.getItem('dpcs.console.session'));
		s.accessToken = 'spoilt'; sessionStorage.setItem('dpcs.console.session', JSON.stringify(s)); })()`, nil),
		chromedp.Navigate(console+"#/operations"), chromedp.Reload())
	read(desk, "console: the session ended", `!!document.querySelector('#login-error')?.textContent.includes('다른 곳에서 로그아웃되어')`)

	for _, p := range problems {
		t.Error(p)
	}
}

// readJS is what a person reads on the page: the visible text, the labels
// a screen reader reads instead of or beside it, and the values of the
// visible fields; not what is folded away (a closed <details>: the raw key
// editor) nor the app catalog's own screen.
const readJS = `(() => {
	const out = [document.title, document.body.innerText];
	for (const e of document.querySelectorAll('[aria-label], [title], input, textarea, select')) {
		if (!e.checkVisibility?.() || e.closest('details:not([open])')) continue;
		if (e.getAttribute('aria-label')) out.push(e.getAttribute('aria-label'));
		if (e.getAttribute('title') && !e.closest('[data-action]')) out.push(e.getAttribute('title'));
		if ((e.tagName === 'INPUT' && !['checkbox', 'radio', 'password', 'hidden', 'range'].includes(e.type)) || e.tagName === 'TEXTAREA') out.push(e.value);
	}
	return out.filter(Boolean);
})()`

// deadLetter writes a usage event the processor cannot read: it goes to
// the dead-letter topic with the consumer's (English) reason.
func deadLetter(t *testing.T, kafkaAddr string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: envelope.TopicUsageEvents, Key: []byte("100"), Value: []byte(`{"not":"an event"}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}
