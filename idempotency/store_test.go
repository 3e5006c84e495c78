package idempotency

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The shared store suite: every Store implementation passes it (miniredis,
// SQLite; under the integration tag real Redis, a Redis Cluster, MariaDB).
func TestStoreSuite(t *testing.T) {
	eachStore(t, func(t *testing.T, h harness) {
		const lease = 10 * time.Second
		ctx := context.Background()
		s := h.store

		t.Run("claim then in progress", func(t *testing.T) {
			k := uniqueKey(t)
			c, err := s.Claim(ctx, k, "a", lease)
			if err != nil || c.Outcome != Acquired {
				t.Fatalf("first claim: %v %v", c.Outcome, err)
			}
			c, err = s.Claim(ctx, k, "b", lease)
			if err != nil || c.Outcome != InProgress {
				t.Fatalf("second claim: %v %v", c.Outcome, err)
			}
			if c.RetryAfter <= 0 || c.RetryAfter > lease {
				t.Errorf("RetryAfter = %v, want (0, %v]", c.RetryAfter, lease)
			}
		})

		t.Run("complete then done", func(t *testing.T) {
			k := uniqueKey(t)
			mustClaim(t, s, k, "a", lease, Acquired)
			result := []byte{0, 1, 2, 'x', 0xff, ':', 'd'}
			if err := s.Complete(ctx, k, "a", result, time.Hour); err != nil {
				t.Fatal(err)
			}
			c := mustClaim(t, s, k, "b", lease, Done)
			if diff := cmp.Diff(result, c.Result); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if err := s.Complete(ctx, k, "a", []byte("again"), time.Hour); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("second complete: %v, want ErrLeaseLost", err)
			}
			if err := s.Release(ctx, k, "a"); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("release after complete: %v, want ErrLeaseLost", err)
			}
			mustClaim(t, s, k, "c", lease, Done)
		})

		t.Run("empty result", func(t *testing.T) {
			k := uniqueKey(t)
			mustClaim(t, s, k, "a", lease, Acquired)
			if err := s.Complete(ctx, k, "a", []byte{}, time.Hour); err != nil {
				t.Fatal(err)
			}
			c := mustClaim(t, s, k, "b", lease, Done)
			if len(c.Result) != 0 {
				t.Errorf("result = %q, want empty", c.Result)
			}
		})

		t.Run("only the owner completes or releases", func(t *testing.T) {
			k := uniqueKey(t)
			mustClaim(t, s, k, "a", lease, Acquired)
			if err := s.Complete(ctx, k, "b", nil, time.Hour); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("complete by other: %v, want ErrLeaseLost", err)
			}
			if err := s.Release(ctx, k, "b"); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("release by other: %v, want ErrLeaseLost", err)
			}
			mustClaim(t, s, k, "c", lease, InProgress)
		})

		t.Run("release lets the next claim in", func(t *testing.T) {
			k := uniqueKey(t)
			mustClaim(t, s, k, "a", lease, Acquired)
			if err := s.Release(ctx, k, "a"); err != nil {
				t.Fatal(err)
			}
			if err := s.Release(ctx, k, "a"); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("second release: %v, want ErrLeaseLost", err)
			}
			mustClaim(t, s, k, "b", lease, Acquired)
		})

		t.Run("expired lease is taken over", func(t *testing.T) {
			k := uniqueKey(t)
			mustClaim(t, s, k, "a", lease, Acquired)
			h.advance(lease + time.Millisecond)
			mustClaim(t, s, k, "b", lease, Acquired)
			if err := s.Complete(ctx, k, "a", []byte("stale"), time.Hour); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("complete by expired owner: %v, want ErrLeaseLost", err)
			}
			if err := s.Release(ctx, k, "a"); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("release by expired owner: %v, want ErrLeaseLost", err)
			}
			if err := s.Complete(ctx, k, "b", []byte("fresh"), time.Hour); err != nil {
				t.Fatal(err)
			}
			if c := mustClaim(t, s, k, "c", lease, Done); string(c.Result) != "fresh" {
				t.Errorf("result %q, want fresh", c.Result)
			}
		})

		t.Run("expired lease cannot complete", func(t *testing.T) {
			k := uniqueKey(t)
			mustClaim(t, s, k, "a", lease, Acquired)
			h.advance(lease + time.Millisecond)
			if err := s.Complete(ctx, k, "a", nil, time.Hour); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("complete after expiry: %v, want ErrLeaseLost", err)
			}
			mustClaim(t, s, k, "b", lease, Acquired)
		})

		t.Run("result expires after its TTL", func(t *testing.T) {
			k := uniqueKey(t)
			mustClaim(t, s, k, "a", lease, Acquired)
			if err := s.Complete(ctx, k, "a", []byte("r"), time.Minute); err != nil {
				t.Fatal(err)
			}
			h.advance(59 * time.Second)
			mustClaim(t, s, k, "b", lease, Done)
			h.advance(2 * time.Second)
			mustClaim(t, s, k, "c", lease, Acquired)
		})

		t.Run("concurrent claims acquire once", func(t *testing.T) {
			k := uniqueKey(t)
			const n = 16
			outcomes := make([]Outcome, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					c, err := s.Claim(ctx, k, string(rune('a'+i)), lease)
					if err != nil {
						t.Error(err)
					}
					outcomes[i] = c.Outcome
				})
			}
			wg.Wait()
			count := map[Outcome]int{}
			for _, o := range outcomes {
				count[o]++
			}
			if diff := cmp.Diff(map[Outcome]int{Acquired: 1, InProgress: n - 1}, count); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
		})
	})
}

func mustClaim(tb testing.TB, s Store, key, token string, lease time.Duration, want Outcome) Claim {
	tb.Helper()
	c, err := s.Claim(context.Background(), key, token, lease)
	if err != nil {
		tb.Fatalf("claim %q by %q: %v", key, token, err)
	}
	if c.Outcome != want {
		tb.Fatalf("claim %q by %q: %v, want %v", key, token, c.Outcome, want)
	}
	return c
}
