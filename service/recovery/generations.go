package recovery

import (
	"context"
	"sync"
	"time"

	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/store"
)

// Generations is a judge.GenerationSource reading the generation SQL names
// (store.RedisState), cached for a second so judging costs no SQL query,
// and read again at once after a stale answer (Forget). It is also the
// door's judge.MarkStore: the family-write marks recorded in redis_marks,
// read with the generation and cached as long.
type Generations struct {
	st    *store.Store
	ttl   time.Duration
	mu    sync.Mutex
	gen   string
	read  time.Time
	known bool // gen was read once

	fmu      sync.Mutex
	floorGen string
	floors   []quota.Mark
	floorAt  time.Time
}

// NewGenerations returns a Generations on st.
func NewGenerations(st *store.Store) *Generations {
	return &Generations{st: st, ttl: time.Second}
}

// Generation returns the generation SQL names. When SQL cannot be read it
// returns the generation last read, if any: a new one is named only by a
// rebuild, which needs SQL, and a rebuild that began is seen by every
// judgement in the state marker itself, so judging goes on through a SQL
// outage (the processors' do too).
func (g *Generations) Generation(ctx context.Context) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.read.IsZero() && time.Since(g.read) < g.ttl {
		return g.gen, nil
	}
	st, err := g.st.RedisState(ctx)
	if err != nil {
		if g.known {
			return g.gen, nil
		}
		return "", err
	}
	g.gen, g.read, g.known = st.Generation, time.Now(), true
	return g.gen, nil
}

// Forget drops the cached generation and marks: the next calls read SQL.
func (g *Generations) Forget() {
	g.mu.Lock()
	g.read = time.Time{}
	g.mu.Unlock()
	g.fmu.Lock()
	g.floorAt = time.Time{}
	g.fmu.Unlock()
}

// Floors returns the family-write marks recorded under gen, read from SQL
// at most once a second. When SQL cannot be read it returns the marks last
// read for gen (counts only grow: older marks are weaker, not wrong), and
// the error only when it has none.
func (g *Generations) Floors(ctx context.Context, gen string) ([]quota.Mark, error) {
	g.fmu.Lock()
	defer g.fmu.Unlock()
	if g.floorGen == gen && !g.floorAt.IsZero() && time.Since(g.floorAt) < g.ttl {
		return g.floors, nil
	}
	rows, err := g.st.RedisMarks(ctx, gen)
	if err != nil {
		if g.floorGen == gen && g.floors != nil {
			return g.floors, nil
		}
		return nil, err
	}
	floors := make([]quota.Mark, len(rows)) // not nil: read
	for i, r := range rows {
		floors[i] = quota.Mark{Stream: r.Stream, From: r.N, To: r.N, Node: r.Node}
	}
	g.floorGen, g.floors, g.floorAt = gen, floors, time.Now()
	return floors, nil
}

// RecordMark records a family-write mark in redis_marks.
func (g *Generations) RecordMark(ctx context.Context, gen string, m quota.Mark) error {
	return g.st.RecordMark(ctx, gen, store.RedisMark{Node: m.Node, Stream: m.Stream, N: m.To})
}

var (
	_ judge.GenerationSource = (*Generations)(nil)
	_ judge.MarkStore        = (*Generations)(nil)
)
