package idempotency

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// funcStore is a Store whose methods are function fields, for making a store
// misbehave in ways the real ones do not: fail, or answer out of contract.
// A nil field fails the test that reaches it.
type funcStore struct {
	tb       testing.TB
	claim    func(ctx context.Context, key, token string, lease time.Duration) (Claim, error)
	complete func(ctx context.Context, key, token string, result []byte, ttl time.Duration) error
	release  func(ctx context.Context, key, token string) error
}

var _ Store = (*funcStore)(nil)

func (s *funcStore) Claim(ctx context.Context, key, token string, lease time.Duration) (Claim, error) {
	if s.claim == nil {
		s.tb.Fatalf("unexpected Claim(%q)", key)
	}
	return s.claim(ctx, key, token, lease)
}

func (s *funcStore) Complete(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	if s.complete == nil {
		s.tb.Fatalf("unexpected Complete(%q)", key)
	}
	return s.complete(ctx, key, token, result, ttl)
}

func (s *funcStore) Release(ctx context.Context, key, token string) error {
	if s.release == nil {
		s.tb.Fatalf("unexpected Release(%q)", key)
	}
	return s.release(ctx, key, token)
}

// funcBatchStore is a funcStore that is also a BatchStore.
type funcBatchStore struct {
	funcStore
	claimBatch    func(ctx context.Context, keys, tokens []string, lease time.Duration) ([]Claim, error)
	completeBatch func(ctx context.Context, keys, tokens []string, results [][]byte, ttl time.Duration) ([]error, error)
	releaseBatch  func(ctx context.Context, keys, tokens []string) ([]error, error)
}

var _ BatchStore = (*funcBatchStore)(nil)

func (s *funcBatchStore) ClaimBatch(ctx context.Context, keys, tokens []string, lease time.Duration) ([]Claim, error) {
	if s.claimBatch == nil {
		s.tb.Fatalf("unexpected ClaimBatch(%q)", keys)
	}
	return s.claimBatch(ctx, keys, tokens, lease)
}

func (s *funcBatchStore) CompleteBatch(ctx context.Context, keys, tokens []string, results [][]byte, ttl time.Duration) ([]error, error) {
	if s.completeBatch == nil {
		s.tb.Fatalf("unexpected CompleteBatch(%q)", keys)
	}
	return s.completeBatch(ctx, keys, tokens, results, ttl)
}

func (s *funcBatchStore) ReleaseBatch(ctx context.Context, keys, tokens []string) ([]error, error) {
	if s.releaseBatch == nil {
		s.tb.Fatalf("unexpected ReleaseBatch(%q)", keys)
	}
	return s.releaseBatch(ctx, keys, tokens)
}

// seqTokens returns a token source giving "t1", "t2", …
func seqTokens() func() string {
	n := 0
	return func() string { n++; return "t" + strconv.Itoa(n) }
}

var errStore = errors.New("store is down")

// The guard passes the claim to the store with its token and lease (rounded
// up to whole milliseconds), and normalises what the store answers: only the
// fields of the outcome survive, a Done result is never nil, an outcome out
// of contract is an error.
func TestGuardNormalisesStoreClaims(t *testing.T) {
	tests := []struct {
		name    string
		store   Claim
		want    Claim
		wantErr string
	}{
		{
			name:  "acquired drops result and retry",
			store: Claim{Outcome: Acquired, Result: []byte("x"), RetryAfter: time.Second, Token: "from-store"},
			want:  Claim{Key: "k", Outcome: Acquired, Token: "t1"},
		},
		{
			name:  "done with nil result gets an empty one",
			store: Claim{Outcome: Done, RetryAfter: time.Second, Token: "from-store"},
			want:  Claim{Key: "k", Outcome: Done, Result: []byte{}},
		},
		{
			name:  "done keeps its result",
			store: Claim{Outcome: Done, Result: []byte("r")},
			want:  Claim{Key: "k", Outcome: Done, Result: []byte("r")},
		},
		{
			name:  "in progress drops result and token",
			store: Claim{Outcome: InProgress, Result: []byte("x"), RetryAfter: 3 * time.Millisecond, Token: "from-store"},
			want:  Claim{Key: "k", Outcome: InProgress, RetryAfter: 3 * time.Millisecond},
		},
		{name: "zero outcome", store: Claim{}, wantErr: `idempotency: claim "k": store returned Outcome(0)`},
		{name: "unknown outcome", store: Claim{Outcome: 7}, wantErr: `idempotency: claim "k": store returned Outcome(7)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotToken string
			var gotLease time.Duration
			s := &funcStore{tb: t, claim: func(_ context.Context, key, token string, lease time.Duration) (Claim, error) {
				gotToken, gotLease = token, lease
				return tt.store, nil
			}}
			g := newGuard(t, s, WithTokens(seqTokens()), WithLease(1500*time.Microsecond))
			c, err := g.Claim(context.Background(), "k")
			if gotToken != "t1" || gotLease != 2*time.Millisecond {
				t.Errorf("store got token %q lease %v, want t1 2ms", gotToken, gotLease)
			}
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("Claim = %+v, %v; want error %q", c, err, tt.wantErr)
				}
				if !cmp.Equal(Claim{}, c) {
					t.Errorf("claim %+v returned with the error", c)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, c); diff != "" {
				t.Errorf("claim (-want +got):\n%s", diff)
			}
		})
	}
}

// A store failure comes back wrapped with the operation and key, reaches
// the hooks, and Do neither runs fn nor hides the failure.
func TestGuardStoreFailures(t *testing.T) {
	ctx := context.Background()
	var claims []ClaimInfo
	var completes, releases []CompleteInfo
	hooks := Hooks{
		OnClaim:    func(i ClaimInfo) { claims = append(claims, i) },
		OnComplete: func(i CompleteInfo) { completes = append(completes, i) },
		OnRelease:  func(i CompleteInfo) { releases = append(releases, i) },
	}
	s := &funcStore{
		tb:       t,
		claim:    func(context.Context, string, string, time.Duration) (Claim, error) { return Claim{}, errStore },
		complete: func(context.Context, string, string, []byte, time.Duration) error { return errStore },
		release:  func(context.Context, string, string) error { return errStore },
	}
	g := newGuard(t, s, WithHooks(hooks))
	mine := Claim{Key: "k", Outcome: Acquired, Token: "tok"}

	if c, err := g.Claim(ctx, "k"); !errors.Is(err, errStore) || err.Error() != `idempotency: claim "k": store is down` || c.Outcome != 0 {
		t.Errorf("Claim = %+v, %v", c, err)
	}
	if err := g.Complete(ctx, mine, []byte("r")); !errors.Is(err, errStore) || err.Error() != `idempotency: complete "k": store is down` {
		t.Errorf("Complete = %v", err)
	}
	if err := g.Release(ctx, mine); !errors.Is(err, errStore) || err.Error() != `idempotency: release "k": store is down` {
		t.Errorf("Release = %v", err)
	}
	ran := false
	res, dup, err := g.Do(ctx, "k", func(context.Context) ([]byte, error) { ran = true; return nil, nil })
	if !errors.Is(err, errStore) || ran || dup || res != nil {
		t.Errorf("Do = %q %v %v (fn ran: %v), want the store error without running fn", res, dup, err, ran)
	}

	if len(claims) != 2 || claims[0].Key != "k" || claims[0].Outcome != 0 || !errors.Is(claims[0].Err, errStore) || !errors.Is(claims[1].Err, errStore) {
		t.Errorf("OnClaim got %+v", claims)
	}
	if len(completes) != 1 || !errors.Is(completes[0].Err, errStore) || len(releases) != 1 || !errors.Is(releases[0].Err, errStore) {
		t.Errorf("OnComplete got %+v, OnRelease got %+v", completes, releases)
	}
}

// Do releases the claim when fn fails, on a context that outlives the
// caller's cancellation, and reports a release failure beside fn's error
// unless the lease was already lost (then there is nothing to release).
func TestGuardDoReleaseOnFailure(t *testing.T) {
	fnErr := errors.New("fn failed")
	tests := []struct {
		name       string
		releaseErr error
		wantStore  bool // the error also wraps errStore
	}{
		{"released", nil, false},
		{"lease already lost", ErrLeaseLost, false},
		{"release fails", errStore, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var released []string
			var releaseCtxErr error
			s := &funcStore{
				tb: t,
				claim: func(context.Context, string, string, time.Duration) (Claim, error) {
					return Claim{Outcome: Acquired}, nil
				},
				release: func(ctx context.Context, key, token string) error {
					released = append(released, key+"/"+token)
					releaseCtxErr = ctx.Err()
					return tt.releaseErr
				},
			}
			g := newGuard(t, s, WithTokens(seqTokens()))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			res, dup, err := g.Do(ctx, "k", func(context.Context) ([]byte, error) {
				cancel() // the caller gives up while fn runs
				return []byte("partial"), fnErr
			})
			if !errors.Is(err, fnErr) || res != nil || dup {
				t.Fatalf("Do = %q %v %v, want fn's error and no result", res, dup, err)
			}
			if got := errors.Is(err, errStore); got != tt.wantStore {
				t.Errorf("error %q wraps the release failure: %v, want %v", err, got, tt.wantStore)
			}
			if errors.Is(err, ErrLeaseLost) {
				t.Errorf("error %q reports the lost lease of a failed fn", err)
			}
			if diff := cmp.Diff([]string{"k/t1"}, released); diff != "" {
				t.Errorf("releases (-want +got):\n%s", diff)
			}
			if releaseCtxErr != nil {
				t.Errorf("release ran on a cancelled context: %v", releaseCtxErr)
			}
		})
	}
}

// Complete and Release accept only a claim the guard acquired.
func TestGuardRejectsClaimsNotAcquired(t *testing.T) {
	ctx := context.Background()
	g := newGuard(t, &funcStore{tb: t}) // the store must not be called
	for _, c := range []Claim{
		{Key: "k", Outcome: Acquired},            // no token
		{Key: "k", Outcome: Done, Token: "t"},    // not acquired
		{Key: "", Outcome: Acquired, Token: "t"}, // no key
		{Key: strings.Repeat("k", MaxKeyLen+1), Outcome: Acquired, Token: "t"},
	} {
		if err := g.Complete(ctx, c, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("Complete(%+v) = %v, want ErrInvalid", c, err)
		}
		if err := g.Release(ctx, c); !errors.Is(err, ErrInvalid) {
			t.Errorf("Release(%+v) = %v, want ErrInvalid", c, err)
		}
		if err := g.CompleteBatch(ctx, []Claim{c}, [][]byte{nil}); !errors.Is(err, ErrInvalid) {
			t.Errorf("CompleteBatch(%+v) = %v, want ErrInvalid", c, err)
		}
		if err := g.ReleaseBatch(ctx, []Claim{c}); !errors.Is(err, ErrInvalid) {
			t.Errorf("ReleaseBatch(%+v) = %v, want ErrInvalid", c, err)
		}
	}
}

// Tokens a token source must not produce: empty, longer than 64 bytes, or
// holding NUL. Nothing is claimed with them.
func TestGuardRejectsBadTokens(t *testing.T) {
	ctx := context.Background()
	for name, tok := range map[string]string{"empty": "", "long": strings.Repeat("t", 65), "nul": "a\x00b"} {
		t.Run(name, func(t *testing.T) {
			g := newGuard(t, &funcBatchStore{funcStore: funcStore{tb: t}}, WithTokens(func() string { return tok }))
			if _, err := g.Claim(ctx, "k"); !errors.Is(err, ErrInvalid) {
				t.Errorf("Claim: %v, want ErrInvalid", err)
			}
			if _, err := g.ClaimBatch(ctx, []string{"k"}); !errors.Is(err, ErrInvalid) {
				t.Errorf("ClaimBatch: %v, want ErrInvalid", err)
			}
		})
	}
	// The longest token allowed is used as given.
	long := strings.Repeat("t", 64)
	s := &funcStore{tb: t, claim: func(_ context.Context, _, token string, _ time.Duration) (Claim, error) {
		if token != long {
			t.Errorf("store got token %q", token)
		}
		return Claim{Outcome: Acquired}, nil
	}}
	if c, err := newGuard(t, s, WithTokens(func() string { return long })).Claim(ctx, "k"); err != nil || c.Token != long {
		t.Errorf("Claim with a 64-byte token = %+v, %v", c, err)
	}
}
