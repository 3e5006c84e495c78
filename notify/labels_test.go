package notify

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/policy"
)

type appsFunc func(ctx context.Context, ids []string) (map[string]policy.AppLabel, error)

func (f appsFunc) AppLabels(ctx context.Context, ids []string) (map[string]policy.AppLabel, error) {
	return f(ctx, ids)
}

// WithApps: a block of an app and a request for an app's time name the app
// as the operator's catalog does, looked up once per poll; a lookup that
// fails names it by the default labels, never by its package id.
func TestNotifierNamesApps(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail=%v", fail), func(t *testing.T) {
			c := newFake(t)
			inbox := newInbox(t, openSQLite(t))
			hub, sub := newHubSub(t, 100, Filter{MemberID: 1, Role: RoleOwner})
			var lookups atomic.Int32
			apps := appsFunc(func(_ context.Context, ids []string) (map[string]policy.AppLabel, error) {
				lookups.Add(1)
				if fail {
					return nil, errors.New("db down")
				}
				return map[string]policy.AppLabel{"com.youtube.app": {Name: "유튜브 키즈"}, "kr.new.app": {Name: "새 앱"}}, nil
			})
			var handled atomic.Int32
			n, errc := startNotifier(t, c, inbox, hub, WithApps(apps),
				WithHooks(Hooks{OnNotify: func(NotifyInfo) { handled.Add(1) }}))
			produce(t, testenv.Producer(t, c),
				record(t, "ntf_a1", t0, envelope.CustomerBlocked{FamilyID: 100, CustomerID: 3, BlockReason: "BLOCK:APP:com.youtube.app",
					Decision: "BLOCKED_APP", BlockedAt: t0}),
				record(t, "ntf_a2", t0, envelope.DataRequested{FamilyID: 100, CustomerID: 3, RequestID: 8, Kind: envelope.KindApp,
					AppID: "kr.new.app", Minutes: 30, RequestedAt: t0}))
			testenv.Eventually(t, "2 records handled", 20*time.Second, func() bool { return handled.Load() == 2 })
			stopNotifier(t, n, errc)
			want := map[string]string{"ntf_a1": "유튜브 키즈 앱 사용이 차단되었습니다.", "ntf_a2": "구성원 3님이 새 앱을 30분 더 쓰게 해 달라고 요청했습니다."}
			if fail {
				want = map[string]string{"ntf_a1": "유튜브 앱 사용이 차단되었습니다.", "ntf_a2": "구성원 3님이 앱을 30분 더 쓰게 해 달라고 요청했습니다."}
			}
			for _, r := range rows(t, inbox, 100) {
				if w, ok := want[r.EventID]; ok && r.Body != w {
					t.Errorf("inbox %s: %q, want %q", r.EventID, r.Body, w)
				}
			}
			for _, m := range drainSub(sub) {
				if w, ok := want[m.Data.EventID]; ok && m.Data.Body != w {
					t.Errorf("pushed %s: %q, want %q", m.Data.EventID, m.Data.Body, w)
				}
			}
			if l := lookups.Load(); l < 1 || l > 2 {
				t.Errorf("%d lookups for at most 2 polls", l)
			}
		})
	}
}
