package judge

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/quota"
)

// A judge takes no replay later than its engine's dedupe window after the
// event's first arrival (quota's contract: a replay that late would be
// counted twice). An event is taken up to its max event age after its
// stamp and its stamp may be up to the max clock skew ahead of the clock
// that first took it, so the two together must fit the window: by default
// the age is 23/24 of the window less the skew (at most 23 h), and an age
// and skew set longer than the window are refused by both constructors.
// Before, only the age was held to the window: an age of the whole window
// with the default 5 min skew was taken, and an event stamped 4 min ahead
// could be replayed a window and 3 min after it first came, past the
// buckets the engine looks in.
func TestMaxEventAgeFitsDedupeWindow(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	engine := func(ttl time.Duration) *State {
		t.Helper()
		eng, err := quota.New(rdb, quota.WithDedupeTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		return mustState(t, eng)
	}
	for _, c := range []struct {
		ttl  time.Duration
		opts []Opt
		want time.Duration // 0: refused
	}{
		{2 * time.Hour, nil, 110 * time.Minute},
		{24 * time.Hour, nil, 22*time.Hour + 55*time.Minute},
		{72 * time.Hour, nil, 23 * time.Hour},
		{2 * time.Hour, []Opt{WithMaxEventAge(115 * time.Minute)}, 115 * time.Minute},
		{2 * time.Hour, []Opt{WithMaxEventAge(2 * time.Hour)}, 0},
		{2 * time.Hour, []Opt{WithMaxEventAge(3 * time.Hour)}, 0},
		{24 * time.Hour, []Opt{WithMaxEventAge(23 * time.Hour)}, 23 * time.Hour},
		{24 * time.Hour, []Opt{WithMaxEventAge(23 * time.Hour), WithMaxClockSkew(2 * time.Hour)}, 0},
		{24 * time.Hour, []Opt{WithMaxClockSkew(time.Hour)}, 22 * time.Hour},
		{2 * time.Hour, []Opt{WithMaxClockSkew(2 * time.Hour)}, 0},
		{4 * time.Minute, nil, 0}, // shorter than the default 5 min skew
		{4 * time.Minute, []Opt{WithMaxClockSkew(time.Second)}, 3*time.Minute + 49*time.Second},
	} {
		qs := engine(c.ttl)
		var popts []ProcessorOpt
		var dopts []DecisionsOpt
		for _, o := range c.opts {
			popts, dopts = append(popts, o), append(dopts, o)
		}
		p, perr := NewProcessor(qs, nil, popts...)
		d, derr := NewDecisions(qs, nil, dopts...)
		if perr == nil {
			defer p.Close(context.Background())
		}
		if derr == nil {
			defer d.Close(context.Background())
		}
		if c.want == 0 {
			if perr == nil || derr == nil {
				t.Errorf("window %s, %d options: processor %v, decisions %v; want both refused", c.ttl, len(c.opts), perr, derr)
			}
			continue
		}
		if perr != nil || derr != nil {
			t.Fatalf("window %s: %v, %v", c.ttl, perr, derr)
		}
		if p.maxAge != c.want || d.maxAge != c.want {
			t.Errorf("window %s, %d options: max event age %s and %s, want %s", c.ttl, len(c.opts), p.maxAge, d.maxAge, c.want)
		}
	}
}
