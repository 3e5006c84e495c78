// Package storetest is a SQL store for tests: migrated, on a settable clock,
// with families made in one call.
package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// Clock is a settable clock for tests.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock is a Clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Seoul is the service's default time zone.
var Seoul, _ = policy.LoadZone(policy.DefaultZone)

// Start is the fixed instant store tests begin at: 2026-02-10 12:00 in Seoul.
var Start = time.Date(2026, 2, 10, 12, 0, 0, 0, Seoul)

// Env is a migrated SQL store on a fresh database, whose clock starts
// at Start, with a cheap password hash.
type Env struct {
	Ctx   context.Context
	DB    *sql.DB
	S     *store.Store
	Clock *Clock
}

// New migrates db (twice: migrations are idempotent) and opens a
// store on it.
func New(tb testing.TB, db *sql.DB) *Env {
	tb.Helper()
	ctx := context.Background()
	for range 2 {
		if err := store.Migrate(ctx, db); err != nil {
			tb.Fatal(err)
		}
	}
	clk := NewClock(Start)
	s, err := store.New(db, store.WithClock(clk.Now), store.WithBcryptCost(4), store.WithLocation(Seoul))
	if err != nil {
		tb.Fatal(err)
	}
	return &Env{Ctx: ctx, DB: db, S: s, Clock: clk}
}

// Password is the password of the members Family creates: one the store's
// password rules (doc/security.md, "Passwords") accept.
const Password = "family-pass-1"

// Family creates family fid (10 MB plan) with an owner (customer fid*10+1)
// and a child (fid*10+2), both with the password Password.
func (e *Env) Family(tb testing.TB, fid int64) {
	tb.Helper()
	if _, err := e.S.CreateFamily(e.Ctx, store.NewFamily{ID: fid, Name: fmt.Sprintf("Family %d", fid), PlanBytes: 10 << 20}, store.System); err != nil {
		tb.Fatal(err)
	}
	for i, role := range []policy.Role{policy.RoleOwner, policy.RoleMember} {
		cid := fid*10 + int64(i) + 1
		if _, err := e.S.AddMember(e.Ctx, store.NewMember{ID: cid, FamilyID: fid, Name: fmt.Sprint("m", cid),
			Phone: fmt.Sprint("010-", cid), Role: role, Password: Password}, store.System); err != nil {
			tb.Fatal(err)
		}
	}
}

// Count is the number of rows of table.
func (e *Env) Count(tb testing.TB, table string) int {
	tb.Helper()
	var n int
	if err := e.DB.QueryRowContext(e.Ctx, "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}
