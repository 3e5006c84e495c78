package recovery

import (
	"context"
	"sync"
	"time"

	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/store"
)

// Generations is a judge.GenerationSource reading the generation SQL names
// (store.RedisState), cached for a second so judging costs no SQL query,
// and read again at once after a stale answer (Forget).
type Generations struct {
	st   *store.Store
	ttl  time.Duration
	mu   sync.Mutex
	gen  string
	read time.Time
}

// NewGenerations returns a Generations on st.
func NewGenerations(st *store.Store) *Generations {
	return &Generations{st: st, ttl: time.Second}
}

// Generation returns the generation SQL names.
func (g *Generations) Generation(ctx context.Context) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.read.IsZero() && time.Since(g.read) < g.ttl {
		return g.gen, nil
	}
	st, err := g.st.RedisState(ctx)
	if err != nil {
		return "", err
	}
	g.gen, g.read = st.Generation, time.Now()
	return g.gen, nil
}

// Forget drops the cached generation: the next Generation reads SQL.
func (g *Generations) Forget() {
	g.mu.Lock()
	g.read = time.Time{}
	g.mu.Unlock()
}

var _ judge.GenerationSource = (*Generations)(nil)
