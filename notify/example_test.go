package notify_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"time"

	_ "modernc.org/sqlite"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/notify"
)

// Texts are Korean by default, as in the seed, with English available.
func ExampleText() {
	alert := envelope.ThresholdAlert{FamilyID: 100, ThresholdPercent: 10, Message: "…"}
	_, ko := notify.Text(alert, notify.Korean)
	_, en := notify.Text(alert, notify.English)
	blocked := envelope.CustomerBlocked{FamilyID: 100, CustomerID: 3, BlockReason: "LIMIT:DATA:DAILY", BlockedAt: time.Now()}
	_, why := notify.Text(blocked, notify.Korean)
	fmt.Println(ko)
	fmt.Println(en)
	fmt.Println(why)
	// Output:
	// 가족 데이터가 10% 미만입니다! 데이터를 충전해주세요.
	// Less than 10% of the family data is left! Please top up.
	// 일일 데이터 한도 초과로 차단되었습니다.
}

// Owners see every notification of their family; members see the
// family-wide ones and their own. Messages carry the inbox id as SSE id.
func ExampleHub() {
	hub, _ := notify.NewHub()
	owner, _ := hub.Subscribe(100, notify.Filter{MemberID: 1, Role: notify.RoleOwner})
	child, _ := hub.Subscribe(100, notify.Filter{MemberID: 3, Role: notify.RoleMember})

	hub.Publish(notify.Notification{ID: 41, EventID: "ntf_a", FamilyID: 100, MemberID: 4, Kind: envelope.SubCustomerBlocked, Payload: []byte(`{}`)})
	hub.Publish(notify.Notification{ID: 42, EventID: "ntf_b", FamilyID: 100, Kind: envelope.SubThresholdAlert,
		Body: "가족 데이터가 50% 미만입니다! 데이터를 충전해주세요.", Payload: []byte(`{}`)})
	closed := make(chan error)
	go func() { closed <- hub.Close(context.Background()) }() // returns once the buffers are read

	for m := range owner.C {
		fmt.Println("owner", m.ID)
	}
	for m := range child.C {
		fmt.Println("child", m.ID)
		m.Data.Payload, m.Data.CreatedAt = nil, time.Time{}
		m.WriteTo(os.Stdout)
	}
	fmt.Println(child.Err(), <-closed)
	// Output:
	// owner 41
	// owner 42
	// child 42
	// id: 42
	// event: notification
	// data: {"id":42,"eventId":"ntf_b","familyId":100,"kind":"THRESHOLD_ALERT","title":"","body":"가족 데이터가 50% 미만입니다! 데이터를 충전해주세요.","payload":null,"createdAt":"0001-01-01T00:00:00Z"}
	//
	// notify: closed <nil>
}

// The inbox keeps one row per notification and one per threshold and
// period, whatever the event ids.
func ExampleSQLInbox() {
	ctx := context.Background()
	db, _ := sql.Open("sqlite", "file:example?mode=memory&cache=shared")
	defer db.Close()
	inbox, _ := notify.NewSQLInbox(db)
	_ = inbox.Migrate(ctx)

	at := time.Date(2026, 2, 6, 14, 30, 0, 0, time.UTC)
	for _, id := range []string{"ntf_1", "ntf_1", "ntf_2"} { // a replay, then a re-send
		e := envelope.New[envelope.Notification](id, at, envelope.ThresholdAlert{FamilyID: 100, ThresholdPercent: 30, Message: "…", Period: "2026-02"})
		n, _ := notify.FromEvent(e, notify.Korean, nil)
		stored, inserted, _ := inbox.Add(ctx, n)
		fmt.Println(id, "stored as", stored.EventID, "new:", inserted)
	}
	rows, _ := inbox.List(ctx, notify.Query{FamilyID: 100, Viewer: notify.Filter{MemberID: 3, Role: notify.RoleMember}})
	fmt.Println(len(rows), rows[0].Body)
	// Output:
	// ntf_1 stored as ntf_1 new: true
	// ntf_1 stored as ntf_1 new: false
	// ntf_2 stored as ntf_1 new: false
	// 1 가족 데이터가 30% 미만입니다! 데이터를 충전해주세요.
}

// A webhook receiver reads the raw body, verifies the signature and the
// timestamp (refusing replays of a captured request) before acting, and
// dedupes on the event id, since a notification may come twice.
func ExampleVerifyRequest() {
	secret := []byte("the DPCS_WEBHOOK_SECRET, 16+ bytes")
	seen := map[string]bool{}
	receiver := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		if err := notify.VerifyRequest(secret, r.Header, body, time.Now(), notify.DefaultTolerance); err != nil {
			switch {
			case errors.Is(err, notify.ErrTimestampTooOld):
				fmt.Println("refused: too old")
			default:
				fmt.Println("refused:", err)
			}
			// Any 4xx but 408 and 429 tells DPCS not to retry.
			http.Error(w, "unverified", http.StatusUnauthorized)
			return
		}
		id := r.Header.Get(notify.HeaderEventID)
		if !seen[id] {
			seen[id] = true
			fmt.Println("accepted", id)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(receiver)
	defer srv.Close()

	hook, _ := notify.NewWebhook(srv.URL, secret)
	n := notify.Notification{ID: 7, EventID: "ntf_7", FamilyID: 100, Kind: envelope.SubThresholdAlert, Payload: []byte(`{}`)}
	_ = hook.Send(context.Background(), n)
	_ = hook.Send(context.Background(), n) // a redelivery: verified, deduped

	// A request captured an hour ago and replayed.
	body, _ := json.Marshal(n)
	ts := time.Now().Add(-time.Hour).Unix()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
	req.Header.Set(notify.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(notify.HeaderSignature, notify.Sign(secret, ts, body))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	// A tampered body.
	req, _ = http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader([]byte(`{"familyId":200}`)))
	req.Header.Set(notify.HeaderTimestamp, strconv.FormatInt(time.Now().Unix(), 10))
	req.Header.Set(notify.HeaderSignature, notify.Sign(secret, time.Now().Unix(), body))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	// Output:
	// accepted ntf_7
	// refused: too old
	// refused: notify: webhook request not verified: signature mismatch
}
