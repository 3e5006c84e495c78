package limit

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// limiterUnderTest is an Limiter and a way to let time pass for it.
type limiterUnderTest struct {
	Limiter
	advance func(time.Duration)
	prefix  string // keeps keys apart on a shared server
}

// testAuthLimiter is the suite every Limiter passes, with a rate of 3 per
// per (one every per/3, 3 at once) and lockouts of per·2/3. A real Redis,
// where time passes by waiting, takes a per of seconds: the suite's steps
// must each take less than per/3 (a busy machine's scheduling included).
func testAuthLimiter(t *testing.T, per time.Duration, open func(t *testing.T) limiterUnderTest) {
	ctx := context.Background()
	r := Rate{3, per}
	t.Run("rate", func(t *testing.T) {
		l := open(t)
		for i := range 3 {
			if wait, err := l.Allow(ctx, l.prefix+"a", r); err != nil || wait != 0 {
				t.Fatalf("request %d: wait %v, %v", i+1, wait, err)
			}
		}
		wait, err := l.Allow(ctx, l.prefix+"a", r)
		if err != nil || wait <= 0 || wait > per/3+2*time.Millisecond { // RedisLimiter rounds up by up to 2 ms
			t.Fatalf("4th request: wait %v, %v; want (0, %v]", wait, err, per/3+2*time.Millisecond)
		}
		if wait, err := l.Allow(ctx, l.prefix+"b", r); err != nil || wait != 0 {
			t.Fatalf("another key: wait %v, %v", wait, err)
		}
		l.advance(wait)
		if wait, err := l.Allow(ctx, l.prefix+"a", r); err != nil || wait != 0 {
			t.Fatalf("after the wait: wait %v, %v", wait, err)
		}
		if wait, err := l.Allow(ctx, l.prefix+"a", r); err != nil || wait <= 0 {
			t.Fatalf("right after: wait %v, %v; want > 0", wait, err)
		}
	})
	t.Run("lockout", func(t *testing.T) {
		l := open(t)
		k := l.prefix + "login"
		lockFor := per * 2 / 3
		fail := func(want int) {
			t.Helper()
			if left, err := l.Fail(ctx, k, 3, lockFor); err != nil || left != want {
				t.Fatalf("Fail = %v, %v; want %v attempts left", left, err, want)
			}
		}
		locked := func() time.Duration {
			t.Helper()
			d, err := l.Locked(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		fail(2)
		fail(1)
		if err := l.Reset(ctx, k); err != nil {
			t.Fatal(err)
		}
		fail(2)
		fail(1)
		if d := locked(); d != 0 {
			t.Fatalf("locked %v before the 3rd consecutive failure", d)
		}
		fail(0)
		d := locked()
		if d <= 0 || d > lockFor {
			t.Fatalf("locked %v, want (0, %v]", d, lockFor)
		}
		if d, err := l.Locked(ctx, l.prefix+"other"); err != nil || d != 0 {
			t.Fatalf("another key locked %v, %v", d, err)
		}
		l.advance(d)
		if d := locked(); d != 0 {
			t.Fatalf("still locked %v after the lockout", d)
		}
		// The lock cleared the count: it takes 3 failures again.
		fail(2)
		fail(1)
		// A count is forgotten lockFor after its last failure.
		l.advance(lockFor)
		fail(2)
		fail(1)
		fail(0)
	})
}

func TestMemoryLimiter(t *testing.T) {
	testAuthLimiter(t, 600*time.Millisecond, func(t *testing.T) limiterUnderTest {
		var now atomic.Pointer[time.Time]
		start := time.Date(2026, 2, 10, 12, 0, 0, 0, time.UTC)
		now.Store(&start)
		return limiterUnderTest{Limiter: NewMemoryLimiter(func() time.Time { return *now.Load() }, 0),
			advance: func(d time.Duration) { t := now.Load().Add(d); now.Store(&t) }}
	})
}

func TestRedisLimiterOnMiniredis(t *testing.T) {
	testAuthLimiter(t, 600*time.Millisecond, func(t *testing.T) limiterUnderTest {
		mr := miniredis.RunT(t)
		now := time.Date(2026, 2, 10, 12, 0, 0, 0, time.UTC)
		mr.SetTime(now) // redis_rate reads TIME
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { rdb.Close() })
		l, err := NewRedisLimiter(rdb)
		if err != nil {
			t.Fatal(err)
		}
		return limiterUnderTest{Limiter: l, advance: func(d time.Duration) {
			now = now.Add(d)
			mr.SetTime(now)
			mr.FastForward(d)
		}}
	})
}

// TestMemoryLimiterBounded: a flood of keys keeps the limiter within its
// capacity, dropping expired keys first and evicting the soonest to expire,
// so a lock outlives a flood of rate keys.
func TestMemoryLimiterBounded(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 2, 10, 12, 0, 0, 0, time.UTC)
	l := NewMemoryLimiter(func() time.Time { return now }, 64)
	if left, err := l.Fail(ctx, "victim", 1, 15*time.Minute); err != nil || left != 0 {
		t.Fatalf("Fail = %v, %v; want 0 attempts left", left, err)
	}
	for i := range 10_000 {
		if _, err := l.Allow(ctx, fmt.Sprint("flood", i), Rate{10, time.Minute}); err != nil {
			t.Fatal(err)
		}
		if n := l.Len(); n > 64 {
			t.Fatalf("after %d keys: %d held, capacity 64", i+1, n)
		}
		if i%100 == 0 {
			now = now.Add(time.Millisecond)
		}
	}
	if d, err := l.Locked(ctx, "victim"); err != nil || d <= 0 {
		t.Errorf("the lock was evicted by the flood: %v, %v", d, err)
	}
	// Expired keys go first: after their minute, new keys find room without
	// evicting live ones.
	now = now.Add(time.Minute)
	for i := range 10 {
		l.Allow(ctx, fmt.Sprint("late", i), Rate{10, time.Minute})
	}
	if n := l.Len(); n != 11 {
		t.Errorf("after the flood expired: %d keys held, want the lock and 10 new ones", n)
	}
}

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Rate
		ok   bool
	}{
		{"60/1m", Rate{60, time.Minute}, true},
		{" 5 / 10s ", Rate{5, 10 * time.Second}, true},
		{"60", Rate{}, false},
		{"x/1m", Rate{}, false},
		{"60/minute", Rate{}, false},
		{"0/1m", Rate{}, false},
		{"-1/1m", Rate{}, false},
		{"10/0s", Rate{}, false},
		{"10/48h", Rate{}, false},
	} {
		got, err := ParseRate(c.in)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("ParseRate(%q) = %v, %v", c.in, got, err)
		}
	}
}
