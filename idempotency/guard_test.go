package idempotency

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

func newGuard(tb testing.TB, s Store, opts ...Option) *Guard {
	tb.Helper()
	g, err := New(s, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return g
}

func TestGuardLifecycle(t *testing.T) {
	eachStore(t, func(t *testing.T, h harness) {
		ctx := context.Background()
		var claims []Outcome
		var completes, releases int
		g := newGuard(t, h.store, WithLease(5*time.Second), WithTTL(time.Hour), WithHooks(Hooks{
			OnClaim:    func(i ClaimInfo) { claims = append(claims, i.Outcome) },
			OnComplete: func(CompleteInfo) { completes++ },
			OnRelease:  func(CompleteInfo) { releases++ },
		}))
		k := Key("processor-usage-group", uniqueKey(t))

		c, err := g.Claim(ctx, k)
		if err != nil || c.Outcome != Acquired || c.Token == "" || c.Key != k {
			t.Fatalf("claim: %+v %v", c, err)
		}
		other, err := g.Claim(ctx, k)
		if err != nil || other.Outcome != InProgress || other.Token != "" || other.RetryAfter <= 0 {
			t.Fatalf("second claim: %+v %v", other, err)
		}
		if err := g.Release(ctx, other); !errors.Is(err, ErrInvalid) {
			t.Errorf("release of an in-progress answer: %v, want ErrInvalid", err)
		}
		if err := g.Release(ctx, c); err != nil {
			t.Fatal(err)
		}
		c, _ = g.Claim(ctx, k)
		if err := g.Complete(ctx, c, nil); err != nil {
			t.Fatal(err)
		}
		d, err := g.Claim(ctx, k)
		if err != nil || d.Outcome != Done || d.Result == nil || len(d.Result) != 0 {
			t.Fatalf("claim after complete: %+v %v", d, err)
		}
		if err := g.Complete(ctx, c, []byte("x")); !errors.Is(err, ErrLeaseLost) {
			t.Errorf("complete twice: %v", err)
		}
		want := []Outcome{Acquired, InProgress, Acquired, Done}
		if diff := cmp.Diff(want, claims); diff != "" {
			t.Errorf("OnClaim outcomes (-want +got):\n%s", diff)
		}
		if completes != 2 || releases != 2 {
			t.Errorf("hooks: %d completes, %d releases; want 2, 2", completes, releases)
		}
	})
}

func TestGuardDo(t *testing.T) {
	eachStore(t, func(t *testing.T, h harness) {
		ctx := context.Background()
		g := newGuard(t, h.store, WithLease(5*time.Second))
		k := uniqueKey(t)
		boom := errors.New("boom")
		calls := 0
		if _, _, err := g.Do(ctx, k, func(context.Context) ([]byte, error) { calls++; return nil, boom }); !errors.Is(err, boom) {
			t.Fatalf("failing fn: %v", err)
		}
		res, dup, err := g.Do(ctx, k, func(context.Context) ([]byte, error) { calls++; return []byte("ok"), nil })
		if err != nil || dup || string(res) != "ok" {
			t.Fatalf("second Do: %q %v %v", res, dup, err)
		}
		res, dup, err = g.Do(ctx, k, func(context.Context) ([]byte, error) { calls++; return []byte("again"), nil })
		if err != nil || !dup || string(res) != "ok" {
			t.Fatalf("duplicate Do: %q %v %v", res, dup, err)
		}
		if calls != 2 {
			t.Errorf("fn ran %d times, want 2", calls)
		}

		k2 := uniqueKey(t)
		c, _ := g.Claim(ctx, k2)
		if _, _, err := g.Do(ctx, k2, func(context.Context) ([]byte, error) { return nil, nil }); !errors.Is(err, ErrInProgress) {
			t.Errorf("Do on a held key: %v, want ErrInProgress", err)
		}
		_ = g.Release(ctx, c)

		k3 := uniqueKey(t)
		_, _, err = g.Do(ctx, k3, func(context.Context) ([]byte, error) {
			h.advance(6 * time.Second) // the work outlived the lease (5 s)
			return []byte("late"), nil
		})
		if !errors.Is(err, ErrLeaseLost) {
			t.Errorf("Do past the lease: %v, want ErrLeaseLost", err)
		}
	})
}

func TestValidation(t *testing.T) {
	s, _ := NewRedisStore(miniredisHarness(t).store.(*RedisStore).rdb)
	for name, o := range map[string]Option{
		"lease":  WithLease(0),
		"ttl":    WithTTL(-1),
		"tokens": WithTokens(nil),
	} {
		if _, err := New(s, o); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := New(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil store: %v", err)
	}
	if _, err := NewRedisStore(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil redis: %v", err)
	}
	if _, err := NewRedisStore(s.rdb, WithKeyPrefix("a{b")); !errors.Is(err, ErrInvalid) {
		t.Errorf("brace prefix: %v", err)
	}
	if _, err := NewSQLStore(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil db: %v", err)
	}
	db := openSQLite(t)
	for name, o := range map[string]SQLOption{
		"table":   WithTable("drop table;"),
		"dialect": WithDialect("oracle"),
		"clock":   WithClock(nil),
	} {
		if _, err := NewSQLStore(db, o); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	g := newGuard(t, s)
	ctx := context.Background()
	if _, err := g.Claim(ctx, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty key: %v", err)
	}
	if _, err := g.Claim(ctx, strings.Repeat("k", MaxKeyLen+1)); !errors.Is(err, ErrInvalid) {
		t.Errorf("long key: %v", err)
	}
	c, _ := g.Claim(ctx, "k")
	if err := g.Complete(ctx, c, make([]byte, MaxResultLen+1)); !errors.Is(err, ErrInvalid) {
		t.Errorf("long result: %v", err)
	}
	bad := newGuard(t, s, WithTokens(func() string { return "" }))
	if _, err := bad.Claim(ctx, "k2"); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty token: %v", err)
	}
	for o, want := range map[Outcome]string{Acquired: "acquired", Done: "done", InProgress: "in-progress", 9: "Outcome(9)"} {
		if o.String() != want {
			t.Errorf("%d.String() = %q", int(o), o.String())
		}
	}
}

func TestSQLStoreTableAndPurge(t *testing.T) {
	db := openSQLite(t)
	h := sqlHarness(t, db, WithTable("event_handled"), WithDialect("sqlite"))
	s := h.store.(*SQLStore)
	if !strings.Contains(s.Schema(), "CREATE TABLE IF NOT EXISTS event_handled") {
		t.Fatalf("schema does not use the table name:\n%s", s.Schema())
	}
	ctx := context.Background()
	mustClaim(t, s, "a", "t", time.Second, Acquired)
	mustClaim(t, s, "b", "t", time.Minute, Acquired)
	h.advance(2 * time.Second)
	n, err := s.Purge(ctx)
	if err != nil || n != 1 {
		t.Fatalf("purge: %d %v, want 1", n, err)
	}
	mustClaim(t, s, "b", "u", time.Minute, InProgress)
}

// The concurrency property: N workers claim one key at once ⇒ exactly one
// acquires; after it completes, every worker sees the same result; if it
// crashes instead, after the lease expires exactly one re-acquires; if it
// releases, exactly one re-acquires at once.
func TestPropertyConcurrentClaims(t *testing.T) {
	// SQLite runs the property on one connection: statements of the workers
	// still interleave in any order, without SQLite's busy-wait sleeps.
	oneConn := func(tb testing.TB) harness {
		db := openSQLite(tb)
		db.SetMaxOpenConns(1)
		return sqlHarness(tb, db)
	}
	// miniredis runs every check (-rapid.checks); the slower stores run the
	// first 200 of them and pass the rest trivially, which keeps
	// `make test` / `make integration` (1000 checks, -race) within budget.
	const slowChecks = 200
	for _, b := range append([]backend{{"miniredis", miniredisHarness}, {"sqlite", oneConn}}, realBackends()...) {
		t.Run(b.name, func(t *testing.T) {
			h := b.open(t)
			const lease = 5 * time.Second
			g := newGuard(t, h.store, WithLease(lease), WithTTL(time.Hour))
			ctx := context.Background()
			checks := 0
			rapid.Check(t, func(rt *rapid.T) {
				if checks++; b.name != "miniredis" && checks > slowChecks {
					return
				}
				n := rapid.IntRange(2, 6).Draw(rt, "workers")
				key := uniqueKey(t)
				round := func() []Claim {
					out := make([]Claim, n)
					var wg sync.WaitGroup
					for i := range n {
						wg.Go(func() {
							c, err := g.Claim(ctx, key)
							if err != nil {
								rt.Errorf("claim: %v", err)
							}
							out[i] = c
						})
					}
					wg.Wait()
					return out
				}
				oneWinner := func(cs []Claim) Claim {
					var won []Claim
					for _, c := range cs {
						switch c.Outcome {
						case Acquired:
							won = append(won, c)
						case InProgress:
						default:
							rt.Fatalf("outcome %v while a claim is live", c.Outcome)
						}
					}
					if len(won) != 1 {
						rt.Fatalf("%d of %d workers acquired", len(won), n)
					}
					return won[0]
				}
				w := oneWinner(round())
				for range rapid.IntRange(0, 2).Draw(rt, "failures") {
					switch rapid.SampledFrom([]string{"crash", "release"}).Draw(rt, "failure") {
					case "crash":
						h.advance(lease + time.Millisecond)
					case "release":
						if err := g.Release(ctx, w); err != nil {
							rt.Fatal(err)
						}
					}
					w2 := oneWinner(round())
					if w2.Token == w.Token {
						rt.Fatal("new owner has the old token")
					}
					w = w2
				}
				result := rapid.SliceOfN(rapid.Byte(), 0, 64).Draw(rt, "result")
				if err := g.Complete(ctx, w, result); err != nil {
					rt.Fatal(err)
				}
				for _, c := range round() {
					if c.Outcome != Done || !cmp.Equal(append([]byte{}, result...), c.Result) {
						rt.Fatalf("after complete: %v %q, want done %q", c.Outcome, c.Result, result)
					}
				}
			})
		})
	}
}
