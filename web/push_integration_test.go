//go:build integration

package web_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dabom/dpcs/internal/pushtest"
	"github.com/dabom/dpcs/internal/testenv/browsertest"
	"github.com/dabom/dpcs/internal/testenv/readable"
)

// swHarnessJS runs the family app's own service worker (app/sw.js, and the
// js/answer.js it imports) in the page, with what a worker has and a page
// does not stood in for: a `self` whose push and notificationclick
// listeners are kept, whose registration records the notifications shown
// and whose clients record the windows opened; everything else (fetch, the
// cookies, navigator.locks) is the page's own. Headless Chromium reaches no
// push service and cannot click a notification's button, so this is the
// closest a test gets to a parent tapping one: the worker's real handlers,
// fed the payload the server really pushed, answering the real API.
const swHarnessJS = `(async () => {
	const load = (path) => { const x = new XMLHttpRequest(); x.open('GET', path, false); x.send(); if (x.status !== 200) throw new Error(path + ': ' + x.status); return x.responseText; };
	const h = { listeners: {}, shown: [], opened: [] };
	const own = {
		location: new URL('/app/sw.js', location.href),
		addEventListener: (type, fn) => { h.listeners[type] = fn; },
		registration: { showNotification: (title, opts) => { h.shown.push({ title, ...opts }); return Promise.resolve(); } },
		clients: { matchAll: async () => [], openWindow: async (url) => { h.opened.push(url); return null; } },
	};
	const self = new Proxy(own, {
		get: (o, k) => (k in o ? o[k] : (typeof window[k] === 'function' ? window[k].bind(window) : window[k])),
		set: (o, k, v) => { o[k] = v; return true; },
	});
	const importScripts = (p) => new Function('self', load(new URL(p, own.location).pathname))(self);
	new Function('self', 'importScripts', 'caches', load('/app/sw.js'))(self, importScripts, undefined);
	// An event as the browser dispatches it: waitUntil's promises awaited.
	h.dispatch = async (type, ev) => {
		const waits = [];
		h.listeners[type]({ ...ev, waitUntil: (p) => waits.push(p) });
		await Promise.all(waits);
	};
	h.push = (msg) => h.dispatch('push', { data: { json: () => msg, text: () => JSON.stringify(msg) } });
	// A tap on the last notification shown whose tag is tag: its button
	// action, or the notification itself when action is ''.
	h.tap = (tag, action) => {
		const n = [...h.shown].reverse().find((s) => s.tag === tag);
		if (!n) throw new Error('no notification tagged ' + tag);
		return h.dispatch('notificationclick', { action, notification: { data: n.data, close() {} } });
	};
	window.dpcsSW = h;
	return Object.keys(h.listeners).join(',');
})()`

// TestPushButtons: every kind of request a child can make (data, time in a
// downtime, time on a blocked app) reaches an owner's browser as a Web Push
// the server signed and encrypted (decrypted by a test push service), and
// the app's own service worker turns it into a notification with buttons
// in the parent's words; tapping them answers the request through the API
// (approve, decline; a second tap says it was answered) and the outcome is
// shown as a notification of its own. An owner's low-data alert carries a
// top-up button that opens the app at the offers (#38: "approve/decline
// from the push and the inbox for every request kind", "a top-up button
// in the owner's alert").
func TestPushButtons(t *testing.T) {
	sys := browsertest.StartSystem(t, browsertest.WithLoopbackPush())
	b := browsertest.New(t)
	fam, child := sys.FamilyID, sys.Child.ID
	ownerTok, childTok := sys.Token(t, sys.Owner), sys.Token(t, sys.Child)

	var key struct {
		PublicKey string `json:"publicKey"`
	}
	sys.Call(t, "", http.MethodGet, "/push/vapid-public-key", nil, &key)
	ps := pushtest.New(t, key.PublicKey)
	e, p256dh, auth := ps.Subscribe("/owner")
	sys.Call(t, ownerTok, http.MethodPost, fmt.Sprintf("/families/%d/push-subscriptions", fam),
		map[string]any{"endpoint": e, "expirationTime": nil, "keys": map[string]string{"p256dh": p256dh, "auth": auth}}, nil, http.StatusCreated)

	// Something to raise and to lift for the child's requests: a daily
	// limit, a night downtime and a blocked app.
	sys.Call(t, ownerTok, http.MethodPatch, fmt.Sprintf("/families/%d/members/%d/policies", fam, child),
		map[string]any{"set": map[string]string{"LIMIT:DATA:DAILY": fmt.Sprint(20 * mib), "BLOCK:TIME:밤": "2200-0700",
			"BLOCK:APP:com.youtube.app": "1"}}, nil)

	owner := front(t, b.Page(t, browsertest.Phone))
	browsertest.Run(t, owner, "open the app", chromedp.Navigate(sys.URL+"/app/"), chromedp.WaitVisible("#login-id", chromedp.ByID))
	login(t, owner, sys.Owner.Phone, sys.Password)
	var listening string
	browsertest.Run(t, owner, "run the service worker in the page", chromedp.Evaluate(swHarnessJS, &listening, awaitPromise))
	if !strings.Contains(listening, "push") || !strings.Contains(listening, "notificationclick") {
		t.Fatalf("the service worker listens to %q", listening)
	}

	type shown struct {
		Title   string `json:"title"`
		Body    string `json:"body"`
		Tag     string `json:"tag"`
		Actions []struct {
			Action string `json:"action"`
			Title  string `json:"title"`
		} `json:"actions"`
	}
	// pushed waits for the owner's push of kind that match accepts, and
	// hands it to the worker; it returns the notification shown.
	pushed := func(what, kind string, match func(map[string]any) bool) shown {
		t.Helper()
		var msg map[string]any
		waitAPI(t, what+" pushed to the owner", 15*time.Second, func() (bool, string) {
			got, bad := ps.Deliveries()
			for _, d := range got {
				var m map[string]any
				if d.Path == "/owner" && json.Unmarshal(d.JSON, &m) == nil && m["kind"] == kind && match(m) {
					msg = m
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d deliveries, refused %v", len(got), bad)
		})
		raw, _ := json.Marshal(msg)
		var n shown
		browsertest.Run(t, owner, "the worker shows "+what, chromedp.Evaluate(
			`dpcsSW.push(`+string(raw)+`).then(() => dpcsSW.shown[dpcsSW.shown.length - 1])`, &n, awaitPromise))
		if n.Tag == "" || n.Title == "" || n.Body == "" {
			t.Errorf("%s: notification %+v", what, n)
		}
		return n
	}
	tap := func(what, tag, action string) shown {
		t.Helper()
		var n shown
		browsertest.Run(t, owner, what, chromedp.Evaluate(fmt.Sprintf(
			`dpcsSW.tap(%q, %q).then(() => dpcsSW.shown[dpcsSW.shown.length - 1])`, tag, action), &n, awaitPromise))
		return n
	}
	buttons := func(n shown) string {
		var s []string
		for _, a := range n.Actions {
			s = append(s, a.Action+"="+a.Title)
		}
		return strings.Join(s, " ")
	}
	status := func(id int64) string {
		var r struct{ Status string }
		sys.Call(t, ownerTok, http.MethodGet, fmt.Sprintf("/families/%d/data-requests/%d", fam, id), nil, &r)
		return r.Status
	}

	for _, c := range []struct {
		kind    string
		body    map[string]any
		buttons string
		action  string
		outcome string
		status  string
	}{
		{"DATA", map[string]any{"amountBytes": 5 * mib, "message": "지도 앱"},
			"approve=오늘 쓸 만큼 승인 decline=거절", "approve", "요청을 승인했어요", "APPROVED"},
		{"TIME", map[string]any{"kind": "TIME", "minutes": 30, "message": "숙제 마무리"},
			"approve=30분 허락 decline=거절", "decline", "요청을 거절했어요", "DECLINED"},
		{"APP", map[string]any{"kind": "APP", "appId": "com.youtube.app", "minutes": 15},
			"approve=15분 허락 decline=거절", "approve", "요청을 승인했어요", "APPROVED"},
	} {
		t.Run(c.kind, func(t *testing.T) {
			var req struct{ ID int64 }
			sys.Call(t, childTok, http.MethodPost, fmt.Sprintf("/families/%d/data-requests", fam), c.body, &req, http.StatusCreated)
			n := pushed("the "+c.kind+" request", "DATA_REQUESTED", func(m map[string]any) bool { return m["requestId"] == float64(req.ID) })
			if got := buttons(n); got != c.buttons {
				t.Errorf("buttons %q, want %q (notification %+v)", got, c.buttons, n)
			}
			if p := readable.Problems(n.Title + " " + n.Body); len(p) > 0 {
				t.Errorf("the notification's words %q %q: %v", n.Title, n.Body, p)
			}
			out := tap("tap "+c.action, n.Tag, c.action)
			if out.Title != c.outcome {
				t.Errorf("after %s: notification %q, want %q", c.action, out.Title, c.outcome)
			}
			if got := status(req.ID); got != c.status {
				t.Errorf("request %d is %s, want %s", req.ID, got, c.status)
			}
			// The other button, tapped late (on a second phone, say): the
			// request was answered already, and stays as it is.
			other := map[string]string{"approve": "decline", "decline": "approve"}[c.action]
			if late := tap("tap "+other+" after", n.Tag, other); late.Title != "이미 답한 요청이에요" {
				t.Errorf("a second answer: notification %q", late.Title)
			}
			if got := status(req.ID); got != c.status {
				t.Errorf("after a second answer, request %d is %s, want %s", req.ID, got, c.status)
			}
		})
	}

	// A request the button cannot approve as it is — more data for the
	// second child, who has no limit to raise — is not said to be answered:
	// the app opens at it, where the parent can see why, and it waits.
	t.Run("DATA without a limit", func(t *testing.T) {
		var req struct{ ID int64 }
		sys.Call(t, sys.Token(t, sys.Child2), http.MethodPost, fmt.Sprintf("/families/%d/data-requests", fam),
			map[string]any{"amountBytes": 5 * mib}, &req, http.StatusCreated)
		n := pushed("the second child's request", "DATA_REQUESTED", func(m map[string]any) bool { return m["requestId"] == float64(req.ID) })
		var before int
		browsertest.Run(t, owner, "count the notifications", chromedp.Evaluate(`dpcsSW.shown.length`, &before))
		tap("tap approve", n.Tag, "approve")
		var after struct {
			Shown  int
			Opened []string
		}
		browsertest.Run(t, owner, "what the tap did", chromedp.Evaluate(`({Shown: dpcsSW.shown.length, Opened: dpcsSW.opened.splice(0)})`, &after))
		if after.Shown != before || len(after.Opened) != 1 || !strings.HasPrefix(after.Opened[0], sys.URL+"/app/#") {
			t.Errorf("approve without a limit: %d notifications shown after it, opened %v; want none and the app", after.Shown-before, after.Opened)
		}
		if got := status(req.ID); got != "PENDING" {
			t.Errorf("request %d is %s, want PENDING", req.ID, got)
		}
		if out := tap("tap decline", n.Tag, "decline"); out.Title != "요청을 거절했어요" {
			t.Errorf("decline: notification %q", out.Title)
		}
	})

	// The child uses most of the demo family's 10 MB pool: the owner's
	// low-data alert has a top-up button, which opens the app at the offers.
	// The downtime goes first: from 22:00 to 07:00 in Seoul it would block
	// the usage, and the alert would never come (the test failed at 22:30).
	sys.Call(t, ownerTok, http.MethodPatch, fmt.Sprintf("/families/%d/members/%d/policies", fam, child),
		map[string]any{"remove": []string{"BLOCK:TIME:밤"}}, nil)
	useData(t, sys.KafkaAddr, fam, child, "com.android.chrome", 7, mib)
	alert := pushed("the low-data alert", "THRESHOLD_ALERT", func(m map[string]any) bool { return m["topUp"] == true })
	if got := buttons(alert); got != "topup=충전하기" {
		t.Errorf("the alert's buttons %q, want topup=충전하기 (notification %+v)", got, alert)
	}
	tap("tap 충전하기", alert.Tag, "topup")
	var opened []string
	browsertest.Run(t, owner, "the windows opened", chromedp.Evaluate(`dpcsSW.opened`, &opened))
	if len(opened) != 1 || !strings.HasPrefix(opened[0], sys.URL+"/app/") {
		t.Fatalf("the top-up button opened %v", opened)
	}
	browsertest.Run(t, owner, "go where the button opened", chromedp.Navigate(opened[0]))
	waitJS(t, owner, "the offers in view", 10*time.Second,
		`(() => { const b = document.querySelector('#topup'); if (!b) return false; const r = b.getBoundingClientRect(); return r.top < innerHeight && r.bottom > 0 && !!b.querySelector('button'); })()`,
		`location.hash + ' ' + document.querySelector('#main')?.innerText`)
}
