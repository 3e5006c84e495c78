package quota

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
)

// provisioned is an engine on a fresh miniredis with family 1 (plan 100
// bytes) and its member 1, judging at now.
func provisioned(t *testing.T, now time.Time, opts ...Option) (*miniredis.Miniredis, *redis.Client, *Engine) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	e, err := New(rdb, append([]Option{WithClock(func() time.Time { return now })}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := e.SetPlan(ctx, 1, 100); err != nil {
		t.Fatal(err)
	}
	if err := e.AddMember(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	return m, rdb, e
}

// The command ApplyCommand describes is the engine's own: sent as is, it
// judges the event, so the engine then sees the event as a replay.
func TestApplyCommandJudgesTheEvent(t *testing.T) {
	now := kst(t, "2026-02-06 14:30")
	_, rdb, e := provisioned(t, now)
	ctx := context.Background()
	if err := e.Load(ctx); err != nil {
		t.Fatal(err)
	}
	ev := Event{ID: "evt_bench", FamilyID: 1, CustomerID: 1, Bytes: 60, AppID: "com.youtube.app", At: now}
	sha, keys, args := e.ApplyCommand(ev)
	if sha != e.apply.Hash() || len(sha) != 40 {
		t.Errorf("sha %q, want the apply script's %q", sha, e.apply.Hash())
	}
	reply, err := rdb.EvalSha(ctx, sha, keys, args...).Slice()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{int64(0), "a40|100|60|60|0|50:1"}, reply); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	r, err := e.Apply(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	want := Result{Duplicate: true, Decision: policy.Allowed, Remaining: 40, Total: 100, DailyUsed: 60, MonthlyUsed: 60, Crossed: []int{50}, Arms: []int{1}}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("Apply after the raw command (-want +got):\n%s", diff)
	}
}

// WithDedupeTTL sets how long an event id is remembered: its bucket lives
// two windows and a 24th from its first write, and the accepted months
// reach one window back.
func TestWithDedupeTTL(t *testing.T) {
	seoul, _ := policy.LoadZone(policy.DefaultZone)
	now := time.Date(2026, 3, 1, 0, 30, 0, 0, seoul) // 30 minutes into March
	for _, tt := range []struct {
		ttl    time.Duration
		months []string
	}{
		{time.Second, []string{"202603"}},
		{29 * time.Minute, []string{"202603"}},
		{time.Hour, []string{"202602", "202603"}},
		{30 * 24 * time.Hour, []string{"202601", "202602", "202603"}},
	} {
		t.Run(tt.ttl.String(), func(t *testing.T) {
			_, rdb, e := provisioned(t, now, WithDedupeTTL(tt.ttl))
			if e.DedupeWindow() != tt.ttl {
				t.Errorf("DedupeWindow = %v, want %v", e.DedupeWindow(), tt.ttl)
			}
			if months, _, _ := e.AcceptedMonths(); !cmp.Equal(tt.months, months) {
				t.Errorf("AcceptedMonths = %v, want %v", months, tt.months)
			}
			ctx := context.Background()
			if _, err := e.Apply(ctx, Event{ID: "a", FamilyID: 1, CustomerID: 1, Bytes: 1, At: now}); err != nil {
				t.Fatal(err)
			}
			ttl, err := rdb.TTL(ctx, e.k.events(1, now.Unix()/int64(tt.ttl/time.Second))).Result()
			if want := (2*tt.ttl + tt.ttl/24).Truncate(time.Second); err != nil || ttl != want {
				t.Errorf("bucket TTL %v, %v; want %v", ttl, err, want)
			}
		})
	}
	for _, bad := range []time.Duration{time.Second - 1, 30*24*time.Hour + time.Second, -time.Hour} {
		if _, err := New(newMiniredis(t), WithDedupeTTL(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("WithDedupeTTL(%v): %v, want ErrInvalid", bad, err)
		}
	}
}

// WithDefaultThresholds sets the alert levels of a family without its own;
// the family's own list wins.
func TestWithDefaultThresholds(t *testing.T) {
	now := kst(t, "2026-02-06 14:30")
	_, _, e := provisioned(t, now, WithDefaultThresholds(policy.Thresholds{40, 80}))
	ctx := context.Background()
	f, err := e.Family(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(policy.Thresholds{80, 40}, f.Thresholds); diff != "" {
		t.Errorf("default thresholds (-want +got):\n%s", diff)
	}
	r, err := e.Apply(ctx, Event{ID: "a", FamilyID: 1, CustomerID: 1, Bytes: 70, At: now})
	if err != nil || !cmp.Equal([]int{80, 40}, r.Crossed) {
		t.Errorf("crossing both = %+v, %v; want crossed [80 40]", r, err)
	}
	if err := e.SetThresholds(ctx, 1, policy.Thresholds{20}); err != nil {
		t.Fatal(err)
	}
	r, err = e.Apply(ctx, Event{ID: "b", FamilyID: 1, CustomerID: 1, Bytes: 20, At: now})
	if err != nil || !cmp.Equal([]int{20}, r.Crossed) {
		t.Errorf("family's own thresholds = %+v, %v; want crossed [20]", r, err)
	}
	for _, bad := range []policy.Thresholds{{0}, {100}, {50, 50}} {
		if _, err := New(newMiniredis(t), WithDefaultThresholds(bad)); err == nil {
			t.Errorf("WithDefaultThresholds(%v) accepted", bad)
		}
	}
}

// Windows, days and months are judged in the engine's zone: Asia/Seoul
// unless WithLocation says otherwise.
func TestLocation(t *testing.T) {
	e, err := New(newMiniredis(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Location().String(); got != policy.DefaultZone {
		t.Errorf("default Location = %s, want %s", got, policy.DefaultZone)
	}
	// 2026-01-31 20:00 UTC is already February in Seoul.
	at := time.Date(2026, 1, 31, 20, 0, 0, 0, time.UTC)
	for zone, month := range map[*time.Location]string{time.UTC: "202601", e.Location(): "202602"} {
		e, err := New(newMiniredis(t), WithLocation(zone), WithClock(func() time.Time { return at }))
		if err != nil {
			t.Fatal(err)
		}
		if e.Location() != zone {
			t.Errorf("Location = %v, want %v", e.Location(), zone)
		}
		if got, _, _ := e.CurrentMonth(); got != month {
			t.Errorf("%v: CurrentMonth = %s, want %s", zone, got, month)
		}
	}
}

func TestUsedPercent(t *testing.T) {
	for _, tt := range []struct {
		total, remaining int64
		want             float64
	}{
		{0, 0, 0},
		{-1, 0, 0},
		{100, 100, 0},
		{100, 0, 100},
		{3, 2, 33.33},
		{3, 1, 66.66}, // truncated, not rounded
		{policy.MaxBytes, policy.MaxBytes - 1, 0},
		{policy.MaxBytes, 0, 100},
	} {
		r := Result{Total: tt.total, Remaining: tt.remaining}
		f := FamilyStatus{Total: tt.total, Remaining: tt.remaining}
		if r.UsedPercent() != tt.want || f.UsedPercent() != tt.want {
			t.Errorf("total %d remaining %d: %v, %v; want %v", tt.total, tt.remaining, r.UsedPercent(), f.UsedPercent(), tt.want)
		}
	}
}

// An empty batch is answered without Redis, and reported to the hook.
func TestApplyEmptyBatch(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	defer rdb.Close()
	var infos []ApplyInfo
	e, err := New(rdb, WithHooks(Hooks{OnApply: func(i ApplyInfo) { infos = append(infos, i) }}))
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	rs, err := e.ApplyBatch(context.Background(), nil)
	if rs != nil || err != nil {
		t.Errorf("ApplyBatch(nil) = %v, %v", rs, err)
	}
	if len(infos) != 1 || infos[0].Events != 0 || infos[0].Err != nil {
		t.Errorf("OnApply got %+v", infos)
	}
}

// An invalid event names its index in the batch; nothing of the batch is judged.
func TestEventError(t *testing.T) {
	now := kst(t, "2026-02-06 14:30")
	_, _, e := provisioned(t, now)
	ctx := context.Background()
	_, err := e.ApplyBatch(ctx, []Event{{ID: "a", FamilyID: 1, CustomerID: 1, Bytes: 1, At: now}, {FamilyID: 1, CustomerID: 1, At: now}})
	var ee *EventError
	if !errors.As(err, &ee) || ee.Index != 1 || !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v, want an EventError at 1", err)
	}
	if got, want := err.Error(), "event 1: quota: invalid argument: event id is empty"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if f, err := e.Family(ctx, 1); err != nil || f.Used != 0 {
		t.Errorf("family after a refused batch: used %d, %v; want 0", f.Used, err)
	}
}

// When Redis lost its scripts (NOSCRIPT) and loading them or the second run
// fails, the batch fails with that error and returns no results.
func TestNoScriptRetryFailures(t *testing.T) {
	for _, tt := range []struct {
		name    string
		fail    func(cmds []redis.Cmder, loaded *bool) bool
		wantErr string
	}{
		{
			name:    "script load",
			fail:    func(cmds []redis.Cmder, _ *bool) bool { return cmds[0].Name() == "script" },
			wantErr: "quota: load scripts: ERR injected",
		},
		{
			name: "second run",
			fail: func(cmds []redis.Cmder, loaded *bool) bool {
				if cmds[0].Name() == "script" {
					*loaded = true
				}
				return *loaded && cmds[0].Name() == "evalsha"
			},
			wantErr: "quota: apply: ERR injected",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			now := kst(t, "2026-02-06 14:30")
			_, rdb, e := provisioned(t, now)
			ctx := context.Background()
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			var loaded bool
			rdb.AddHook(&faultHook{before: func(cmds []redis.Cmder) error {
				if tt.fail(cmds, &loaded) {
					return injected
				}
				return nil
			}})
			rs, err := e.ApplyBatch(ctx, []Event{{ID: "a", FamilyID: 1, CustomerID: 1, Bytes: 1, At: now}})
			if rs != nil || err == nil || err.Error() != tt.wantErr {
				t.Errorf("ApplyBatch = %v, %v; want %q", rs, err, tt.wantErr)
			}
		})
	}
}
