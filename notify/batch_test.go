package notify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv"
)

func TestSQLInboxBatchSQLite(t *testing.T) {
	inboxBatchSuite(t, newInbox(t, openSQLite(t)))
}

// inboxBatchSuite holds AddBatch to Add's contract, per notification:
// duplicates within the batch and against older rows, a threshold alert
// re-sent under a new id, and an invalid notification failing the whole
// batch before anything is stored.
func inboxBatchSuite(t *testing.T, in *SQLInbox) {
	ctx := context.Background()
	note := func(id string, family int64, kind envelope.SubType, key string) Notification {
		if key == "" {
			key = id
		}
		return Notification{EventID: id, DedupeKey: key, FamilyID: family, MemberID: 3, Kind: kind,
			Title: "t", Body: "b " + id, Payload: []byte(`{"x":1}`), CreatedAt: t0}
	}
	old, _, err := in.Add(ctx, note("ntf_old", 300, envelope.SubCustomerBlocked, ""))
	if err != nil {
		t.Fatal(err)
	}
	th := ThresholdKey(300, 10, "2026-02")
	batch := []Notification{
		note("ntf_1", 300, envelope.SubCustomerBlocked, ""),
		note("ntf_old", 300, envelope.SubCustomerBlocked, ""), // stored before
		note("ntf_t1", 300, envelope.SubThresholdAlert, th),
		note("ntf_1", 300, envelope.SubCustomerBlocked, ""), // twice in the batch
		note("ntf_t2", 300, envelope.SubThresholdAlert, th), // same threshold, new id
		note("ntf_q", 301, envelope.SubQuotaUpdated, ""),
	}
	stored, err := in.AddBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range stored {
		got = append(got, s.EventID)
	}
	if diff := cmp.Diff([]string{"ntf_1", "ntf_old", "ntf_t1", "ntf_1", "ntf_t1", "ntf_q"}, got); diff != "" {
		t.Errorf("stored rows (-want +got):\n%s", diff)
	}
	if stored[1].ID != old.ID || stored[0].ID != stored[3].ID || stored[2].ID != stored[4].ID {
		t.Errorf("ids: %d %d %d %d %d (old %d)", stored[0].ID, stored[1].ID, stored[2].ID, stored[3].ID, stored[4].ID, old.ID)
	}
	if stored[0].ID <= old.ID || stored[2].ID <= stored[0].ID || stored[5].ID <= stored[2].ID {
		t.Errorf("new rows not in batch order after the old one: %+v", stored)
	}
	if stored[0].Body != "b ntf_1" || stored[0].DeliveredAt != nil || stored[0].MemberID != 3 {
		t.Errorf("row read back: %+v", stored[0])
	}
	if n := len(rows(t, in, 300)); n != 3 {
		t.Errorf("family 300 has %d rows, want 3", n)
	}
	at := t0.Add(time.Minute)
	if err := in.MarkDeliveredBatch(ctx, []int64{stored[0].ID, stored[5].ID}, at); err != nil {
		t.Fatal(err)
	}
	again, err := in.AddBatch(ctx, batch[:1])
	if err != nil {
		t.Fatal(err)
	}
	if d := again[0].DeliveredAt; d == nil || !d.Equal(at) {
		t.Errorf("delivered_at after MarkDeliveredBatch: %v, want %v", d, at)
	}
	bad := []Notification{note("ntf_fine", 302, envelope.SubCustomerBlocked, ""), note("", 302, envelope.SubCustomerBlocked, "k")}
	if _, err := in.AddBatch(ctx, bad); !errors.Is(err, ErrInvalid) {
		t.Errorf("invalid notification in a batch: %v, want ErrInvalid", err)
	}
	if n := len(rows(t, in, 302)); n != 0 {
		t.Errorf("a refused batch stored %d rows", n)
	}
}

// A poll stored but never committed is replayed whole to the next notifier
// of the group: each notification stays stored once, and nothing stored is
// pushed again. A live-only QUOTA_UPDATED is not claimed in the guard
// (recentKeys dedupes it within one notifier), so its replay to another
// notifier is pushed again, guard or not: nothing durable remembers it —
// unless a channel takes QUOTA_UPDATED too: then the guard claims it, and
// the replay pushes nothing.
func TestReplayAfterCrashBeforeCommit(t *testing.T) {
	for _, mode := range []string{"guard", "inbox-only", "guard, a channel takes QUOTA_UPDATED"} {
		guarded, channel := mode != "inbox-only", strings.Contains(mode, "channel")
		t.Run(mode, func(t *testing.T) {
			c := newFake(t)
			var refuse atomic.Bool
			refuse.Store(true)
			testenv.RefuseCommits(c, refuse.Load)
			inbox := newInbox(t, openSQLite(t))
			var recs []*kgo.Record
			for i := range 30 {
				id := fmt.Sprintf("ntf_%d", i)
				switch i % 3 {
				case 0:
					recs = append(recs, blockedRec(t, id, 100, int64(i+1)))
				case 1:
					recs = append(recs, thresholdRec(t, id, 100, i+1, "2026-02"))
				default:
					recs = append(recs, quotaRec(t, id, 100, int64(i+1)))
				}
			}
			produce(t, testenv.Producer(t, c), recs...)
			var opts []Option
			if guarded {
				opts = append(opts, WithGuard(newGuard(t)))
			}
			if channel {
				opts = append(opts, WithChannel("hook", ChannelFunc(func(context.Context, Notification) error { return nil }),
					envelope.SubQuotaUpdated))
			}
			run := func(name string) (pushed map[envelope.SubType]int, outcomes map[Outcome]int, failedCommits int) {
				hub, sub := newHubSub(t, 100, Filter{Role: RoleAdmin})
				var handled, failed atomic.Int32
				outcomes = map[Outcome]int{}
				mu := make(chan struct{}, 1)
				n, errc := startNotifier(t, c, inbox, hub, append(opts, WithHooks(Hooks{
					OnNotify: func(i NotifyInfo) {
						mu <- struct{}{}
						outcomes[i.Outcome]++
						<-mu
						handled.Add(1)
					},
					OnCommit: func(i CommitInfo) {
						if i.Err != nil {
							failed.Add(1)
						}
					},
				}))...)
				testenv.Eventually(t, name+": 30 handled", 20*time.Second, func() bool { return handled.Load() >= 30 })
				stopNotifier(t, n, errc)
				pushed = map[envelope.SubType]int{}
				for _, m := range drainSub(sub) {
					pushed[m.Data.Kind]++
				}
				return pushed, outcomes, int(failed.Load())
			}
			pushed, outcomes, failed := run("first")
			if failed == 0 {
				t.Fatal("no commit was refused: the crash did not happen")
			}
			want := map[envelope.SubType]int{envelope.SubCustomerBlocked: 10, envelope.SubThresholdAlert: 10, envelope.SubQuotaUpdated: 10}
			if diff := cmp.Diff(want, pushed); diff != "" {
				t.Errorf("first run pushed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[Outcome]int{Delivered: 30}, outcomes); diff != "" {
				t.Errorf("first run outcomes (-want +got):\n%s", diff)
			}
			refuse.Store(false)
			pushed, outcomes, _ = run("replay")
			want = map[envelope.SubType]int{envelope.SubQuotaUpdated: 10}
			wantOut := map[Outcome]int{Duplicate: 20, Delivered: 10}
			if channel {
				want, wantOut = map[envelope.SubType]int{}, map[Outcome]int{Duplicate: 30}
			}
			if diff := cmp.Diff(want, pushed); diff != "" {
				t.Errorf("replay pushed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantOut, outcomes); diff != "" {
				t.Errorf("replay outcomes (-want +got):\n%s", diff)
			}
			got := rows(t, inbox, 100)
			kinds := map[envelope.SubType]int{}
			for _, r := range got {
				kinds[r.Kind]++
				if r.DeliveredAt == nil {
					t.Errorf("row %s not marked delivered", r.EventID)
				}
			}
			if diff := cmp.Diff(map[envelope.SubType]int{envelope.SubCustomerBlocked: 10, envelope.SubThresholdAlert: 10}, kinds); diff != "" {
				t.Errorf("inbox (-want +got):\n%s", diff)
			}
		})
	}
}

// recentKeys forgets the oldest key once it holds recentCap.
func TestRecentKeys(t *testing.T) {
	var r recentKeys
	if r.has("a") {
		t.Fatal("an empty set has a key")
	}
	for i := range recentCap {
		r.add(fmt.Sprint("k", i))
	}
	r.add("k1") // already there: nothing moves
	if !r.has("k0") || !r.has("k1") || len(r.set) != recentCap {
		t.Fatalf("full set: has k0 %v, k1 %v, size %d", r.has("k0"), r.has("k1"), len(r.set))
	}
	r.add("new")
	if r.has("k0") || !r.has("k1") || !r.has("new") || len(r.set) != recentCap {
		t.Errorf("after one more: has k0 %v (want false), k1 %v, new %v, size %d", r.has("k0"), r.has("k1"), r.has("new"), len(r.set))
	}
}
