package service

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/api"
)

// demoLogin signs member or admin id of the all-in-one's demo in at base
// and returns its access token.
func demoLogin(t *testing.T, base string, id int64) string {
	t.Helper()
	body := do(t, "POST", base+"/auth/token", "", fmt.Sprintf(`{"login":"%d","password":"%s"}`, id, DemoPassword), http.StatusOK)
	var tok struct{ AccessToken string }
	if err := json.Unmarshal([]byte(body), &tok); err != nil || tok.AccessToken == "" {
		t.Fatalf("login %d: %s", id, body)
	}
	return tok.AccessToken
}

// sseReader reads a notification stream of the all-in-one: each
// notification event's data, in order, on C.
type sseReader struct {
	C    chan notify.Notification
	resp *http.Response
}

func openLive(t *testing.T, url, token string) *sseReader {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("SSE %s: %v %v", url, resp, err)
	}
	s := &sseReader{C: make(chan notify.Notification, 256), resp: resp}
	go func() {
		defer close(s.C)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event:"):
				event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
			case strings.HasPrefix(line, "data:") && event == notify.EventName:
				var n notify.Notification
				if json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(line, "data:"))), &n) == nil {
					s.C <- n
				}
			}
		}
	}()
	t.Cleanup(func() { resp.Body.Close() })
	return s
}

// await returns the first notification of kind on s (skipping others, which
// it returns too), failing after the deadline with what was seen.
func (s *sseReader) await(t *testing.T, who string, kind envelope.SubType, d time.Duration) (notify.Notification, []notify.Notification) {
	t.Helper()
	var seen []notify.Notification
	timeout := time.After(d)
	for {
		select {
		case n, ok := <-s.C:
			if !ok {
				t.Fatalf("%s: stream ended while waiting for %s; seen %v", who, kind, kinds(seen))
			}
			if n.Kind == kind {
				return n, seen
			}
			seen = append(seen, n)
		case <-timeout:
			t.Fatalf("%s: no %s within %s; seen %v", who, kind, d, kinds(seen))
		}
	}
}

func kinds(ns []notify.Notification) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = string(n.Kind)
	}
	return out
}

// TestSystemAskForMore is the ask-for-more story on the all-in-one (embedded
// Kafka, Redis and SQL; relay, notifier and API as deployed): a child blocked
// by its monthly limit asks; the owner's live stream shows DATA_REQUESTED;
// the owner approves DAY; the child's next event is allowed and its stream
// shows DATA_REQUEST_ANSWERED. Then a decline and a top-up approval.
func TestSystemAskForMore(t *testing.T) {
	testenv.AwayFromMidnight(t) // a day's grant, then an event stamped now
	ctx := context.Background()
	// The demo family alone, no simulated traffic: the story's events are
	// the only ones the notifier has to carry.
	s := startDemoFamily(t, nil)
	base := "http://" + s.HTTPAddr
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		rows, err := s.Store.DB().QueryContext(ctx, `SELECT id, topic, event_type, published_at IS NOT NULL, attempts FROM outbox ORDER BY id`)
		if err != nil {
			t.Log(err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			var id, attempts int64
			var topic, et string
			var pub bool
			rows.Scan(&id, &topic, &et, &pub, &attempts)
			t.Logf("outbox %d %s %s published=%v attempts=%d", id, topic, et, pub, attempts)
		}
	})
	const dad, child, sibling = 1000, 1002, 1003
	ownerTok, childTok, siblingTok := demoLogin(t, base, dad), demoLogin(t, base, child), demoLogin(t, base, sibling)
	seq := 0
	use := func(bytes int64) quota.Result {
		t.Helper()
		seq++
		r, err := s.Engine.Apply(ctx, quota.Event{ID: fmt.Sprintf("evt_ask_%d", seq), FamilyID: DemoFamilyID, CustomerID: child,
			Bytes: bytes, AppID: "com.youtube.app", At: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	do(t, "PATCH", base+"/families/100/members/1002/policies", ownerTok, `{"set":{"LIMIT:DATA:MONTHLY":"1048576"}}`, http.StatusOK)
	if r := use(1 << 20); r.Decision != policy.Allowed {
		t.Fatalf("first MB: %+v", r)
	}
	if r := use(1 << 20); r.Decision != policy.BlockedLimitMonthly {
		t.Fatalf("over the limit: %+v", r)
	}

	ownerLive := openLive(t, base+"/families/100/notifications/stream", ownerTok)
	childLive := openLive(t, base+"/families/100/notifications/stream", childTok)
	const wait = 20 * time.Second

	// Ask → the owner is told live.
	var req api.DataRequestView
	if err := json.Unmarshal([]byte(do(t, "POST", base+"/families/100/data-requests", childTok,
		`{"amountBytes":2097152,"message":"숙제 자료"}`, http.StatusCreated)), &req); err != nil {
		t.Fatal(err)
	}
	asked, _ := ownerLive.await(t, "owner", envelope.SubDataRequested, wait)
	var ap envelope.DataRequested
	if err := json.Unmarshal(asked.Payload, &ap); err != nil || ap.RequestID != req.ID || ap.CustomerID != child ||
		ap.AmountBytes != 2<<20 || ap.Message != "숙제 자료" || asked.Title != "데이터 추가 요청" {
		t.Errorf("DATA_REQUESTED: %+v %+v %v", asked, ap, err)
	}

	// Approve DAY → allowed at once, and the child is told live.
	var approved api.DataRequestView
	if err := json.Unmarshal([]byte(do(t, "POST", fmt.Sprintf("%s/families/100/data-requests/%d/approve", base, req.ID), ownerTok,
		`{"grant":"DAY"}`, http.StatusOK)), &approved); err != nil {
		t.Fatal(err)
	}
	if approved.Standing == nil || approved.Standing.Status != "ALLOWED" {
		t.Errorf("approve answer: %+v", approved)
	}
	if r := use(1 << 20); r.Decision != policy.Allowed {
		t.Errorf("the next event after the approval: %+v", r)
	}
	answered, seen := childLive.await(t, "child", envelope.SubDataRequestAnswered, wait)
	var aa envelope.DataRequestAnswered
	if err := json.Unmarshal(answered.Payload, &aa); err != nil || aa.Status != envelope.AnswerApproved || aa.Grant != envelope.GrantDay ||
		aa.AmountBytes != 2<<20 || aa.AnsweredBy != dad {
		t.Errorf("DATA_REQUEST_ANSWERED: %+v %v", aa, err)
	}
	for _, n := range seen {
		if n.Kind == envelope.SubDataRequested {
			t.Errorf("the child saw the owners' DATA_REQUESTED: %+v", n)
		}
	}
	ownerLive.await(t, "owner", envelope.SubDataRequestAnswered, wait)

	// Decline → the child is told, with the reason.
	var req2 api.DataRequestView
	json.Unmarshal([]byte(do(t, "POST", base+"/families/100/data-requests", childTok, `{"amountBytes":1048576}`, http.StatusCreated)), &req2)
	ownerLive.await(t, "owner", envelope.SubDataRequested, wait)
	do(t, "POST", fmt.Sprintf("%s/families/100/data-requests/%d/decline", base, req2.ID), ownerTok, `{"reason":"내일 다시"}`, http.StatusOK)
	declined, _ := childLive.await(t, "child", envelope.SubDataRequestAnswered, wait)
	if err := json.Unmarshal(declined.Payload, &aa); err != nil || aa.Status != envelope.AnswerDeclined || aa.Reason != "내일 다시" ||
		!strings.Contains(declined.Body, "거절") {
		t.Errorf("decline: %+v %+v", declined, aa)
	}

	// TOPUP → the pool grows by the offer bought.
	before, err := s.Engine.Family(ctx, DemoFamilyID)
	if err != nil {
		t.Fatal(err)
	}
	var req3 api.DataRequestView
	json.Unmarshal([]byte(do(t, "POST", base+"/families/100/data-requests", childTok, `{"amountBytes":5242880}`, http.StatusCreated)), &req3)
	do(t, "POST", fmt.Sprintf("%s/families/100/data-requests/%d/approve", base, req3.ID), ownerTok, `{"grant":"TOPUP","offerId":"100MB"}`, http.StatusOK)
	after, err := s.Engine.Family(ctx, DemoFamilyID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Total != before.Total+100<<20 {
		t.Errorf("pool total %d → %d, want +100 MiB (the offer bought)", before.Total, after.Total)
	}
	topped, _ := childLive.await(t, "child", envelope.SubDataRequestAnswered, wait)
	if err := json.Unmarshal(topped.Payload, &aa); err != nil || aa.Grant != envelope.GrantTopUp {
		t.Errorf("top-up answer: %+v", aa)
	}

	// The inboxes: the child has the three answers and not its requests;
	// the sibling has none of it; the owner has all six.
	inbox := func(tok string) map[envelope.SubType]int {
		var page struct{ Items []notify.Notification }
		if err := json.Unmarshal([]byte(do(t, "GET", base+"/families/100/notifications?limit=200", tok, "", http.StatusOK)), &page); err != nil {
			t.Fatal(err)
		}
		out := map[envelope.SubType]int{}
		for _, n := range page.Items {
			if n.Kind == envelope.SubDataRequested || n.Kind == envelope.SubDataRequestAnswered {
				out[n.Kind]++
			}
		}
		return out
	}
	for who, c := range map[string]struct {
		tok  string
		want map[envelope.SubType]int
	}{
		"owner":   {ownerTok, map[envelope.SubType]int{envelope.SubDataRequested: 3, envelope.SubDataRequestAnswered: 3}},
		"child":   {childTok, map[envelope.SubType]int{envelope.SubDataRequestAnswered: 3}},
		"sibling": {siblingTok, map[envelope.SubType]int{}},
	} {
		if got := inbox(c.tok); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s's inbox: %v, want %v", who, got, c.want)
		}
	}
}
