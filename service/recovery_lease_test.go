package service

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/service/store"
)

// msgLog is a slog.Handler that sends every message to a channel.
type msgLog struct{ msgs chan string }

func (l msgLog) Enabled(context.Context, slog.Level) bool { return true }
func (l msgLog) Handle(_ context.Context, r slog.Record) error {
	select {
	case l.msgs <- r.Message:
	default:
	}
	return nil
}
func (l msgLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l msgLog) WithGroup(string) slog.Handler      { return l }

// A rebuild that takes longer than the lease keeps it: another instance that
// finds Redis stale meanwhile waits for it instead of starting a second
// rebuild whose generation the first one's finish would overwrite (seen in
// make chaos: 3000 families took 36 s, the lease is 30 s). Its doors
// restore no family on touch: the rebuild restores every family under the
// lease (a generation restored on touch holds the lease only to drain).
func TestRecoveryKeepsLeaseWhileRebuilding(t *testing.T) {
	r := newRecoveryRig(t)
	ctx := r.h.Ctx
	var cmu sync.Mutex
	now := time.Now()
	clock := func() time.Time { cmu.Lock(); defer cmu.Unlock(); return now }
	st, err := store.New(r.db, store.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(r.h.KafkaOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	const lease = 300 * time.Millisecond
	bLog := msgLog{msgs: make(chan string, 100)}
	bRebuilt := make(chan struct{}, 1)
	b, err := recovery.New(recovery.Config{Store: st, State: mustState(t, r.h.Engine), Admin: kadm.NewClient(cl), Owner: "b",
		Lease: lease, Quiet: time.Millisecond, Logger: slog.New(bLog),
		Rebuild: func(ctx context.Context, gen string) (recovery.Report, error) {
			bRebuilt <- struct{}{}
			return recovery.Rebuild(ctx, st, mustState(t, r.h.Engine), gen)
		}})
	if err != nil {
		t.Fatal(err)
	}
	gen, err := b.Generation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bDone := make(chan error, 1)
	var bGen string
	a, err := recovery.New(recovery.Config{Store: st, State: mustState(t, r.h.Engine), Admin: kadm.NewClient(cl), Owner: "a",
		Lease: lease, Quiet: time.Millisecond,
		Rebuild: func(ctx context.Context, next string) (recovery.Report, error) {
			cmu.Lock()
			now = now.Add(time.Hour) // the rebuild outlasts the lease taken before it
			cmu.Unlock()
			deadline := time.Now().Add(20 * lease)
			for {
				s, err := st.RedisState(ctx)
				if err == nil && s.Owner == "a" && s.LeaseUntil.After(clock()) {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("the rebuild lease was not renewed within %s of rebuilding (state %+v, %v)", 20*lease, s, err)
					break
				}
				time.Sleep(lease / 10)
			}
			go func() {
				var err error
				bGen, err = b.Recover(r.h.Ctx, gen, errors.New("stale"))
				bDone <- err
			}()
			limit := time.After(10 * time.Second)
		wait: // b either waits for a's lease or starts a rebuild of its own
			for {
				select {
				case m := <-bLog.msgs:
					if m == "recovery: another instance is rebuilding Redis; waiting" {
						break wait
					}
				case <-bRebuilt:
					t.Errorf("a second instance started a rebuild while the first was rebuilding")
					break wait
				case <-limit:
					t.Errorf("the second instance neither waited nor rebuilt within 10 s")
					break wait
				}
			}
			return recovery.Rebuild(ctx, st, mustState(t, r.h.Engine), next)
		}})
	if err != nil {
		t.Fatal(err)
	}
	aGen, err := a.Recover(ctx, gen, errors.New("stale"))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	if bGen != aGen {
		t.Errorf("the waiting instance resumed with generation %s, the rebuild wrote %s", bGen, aGen)
	}
	sqlState, err := st.RedisState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	marks, err := r.h.Engine.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sqlState.Generation != aGen || len(marks) != 1 || marks[0].Generation != aGen {
		t.Errorf("SQL names %s, Redis %+v; want both %s", sqlState.Generation, marks, aGen)
	}
}
