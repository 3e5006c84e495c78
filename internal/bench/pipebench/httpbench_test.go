package pipebench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/service/judge"
)

// RunHTTP's steps decide without errors, unguarded and guarded; guarded, the
// group commits leave the decisions' watermarks in the state marker.
func TestRunHTTP(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		// The window of a step stays open until a call ended in it; the
		// deadline turns a call that never ends into a failure, not a hang.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		rep, err := RunHTTP(ctx, HTTPConfig{Redis: rdb, Families: 40, Concurrency: 4, Rate: 200, Batch: 3,
			Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Dir: t.TempDir(), Guarded: guarded})
		if err != nil {
			t.Fatalf("guarded=%v: %v", guarded, err)
		}
		var decided int
		for _, st := range rep.Steps {
			if st.Errors > 0 {
				t.Errorf("guarded=%v: step %q: %d errors", guarded, st.Name, st.Errors)
			}
			if strings.HasPrefix(st.Name, "POST /decisions") {
				decided++
				if st.Ops == 0 {
					t.Errorf("guarded=%v: step %q decided nothing", guarded, st.Name)
				}
			}
		}
		if decided != 3 {
			t.Errorf("guarded=%v: %d /decisions steps, want 3: %+v", guarded, decided, rep.Steps)
		}
		marked := false
		for _, k := range m.Keys() {
			if strings.Contains(k, "dpcs:state:") {
				fields, err := m.HKeys(k)
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range fields {
					marked = marked || strings.HasPrefix(f, "w:"+judge.DecisionStream)
				}
			}
		}
		if marked != guarded {
			t.Errorf("guarded=%v: decisions' watermarks in the marker: %v", guarded, marked)
		}
	}
}
