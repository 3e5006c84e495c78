// Package recoverybench measures how long DPCS takes to rebuild Redis from SQL
// after Redis lost its state (recovery.Guard; doc/architecture.md, "Never
// trust Redis blindly"): it seeds a MariaDB/MySQL database in bulk with a
// family population and its usage history, then times recovery.Rebuild
// over every family and a whole recovery.Guard.RebuildNow (lease, marker,
// drain, rebuild, finish) against a real Redis, with Kafka in process (kfake).
// examples/recoverybench is its command; `make bench` runs it at 100,000
// families.
package recoverybench

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/store"
)

// Population is what Seed writes. Family ids are 1..Families, members
// f*10+1 .. f*10+MembersPerFamily (member 1 the owner).
type Population struct {
	// Families: default 100,000.
	Families int
	// MembersPerFamily: default 4 (at most 9).
	MembersPerFamily int
	// RowsPerFamily is the usage_record rows of each family: default 20, the
	// last Recent of them judged within the past 24 hours (dedupe records to
	// restore), the others earlier in the engine's current month.
	RowsPerFamily int
	// Recent: default 3.
	Recent int
	// History is the usage_record rows of each family in the twelve months
	// before the current one (a carrier's table keeps every month), which
	// a rebuild must not read: default 0.
	History int
	// Writers is how many connections insert at once: default 4.
	Writers int
}

func (p *Population) defaults() error {
	if p.Families == 0 {
		p.Families = 100_000
	}
	if p.MembersPerFamily == 0 {
		p.MembersPerFamily = 4
	}
	if p.RowsPerFamily == 0 {
		p.RowsPerFamily = 20
	}
	if p.Recent == 0 {
		p.Recent = 3
	}
	if p.Writers == 0 {
		p.Writers = 4
	}
	switch {
	case p.Families < 1, p.MembersPerFamily < 1, p.MembersPerFamily > 9, p.RowsPerFamily < 1,
		p.Recent < 0, p.Recent > p.RowsPerFamily, p.Writers < 1, p.History < 0:
		return fmt.Errorf("recoverybench: bad population %+v", *p)
	}
	return nil
}

// Seeded counts what Seed wrote.
type Seeded struct {
	Families, Members, Policies, TopUps, UsageRows int
	Took                                           time.Duration
}

// Rows is every row Seed wrote.
func (s Seeded) Rows() int { return s.Families + s.Members + s.Policies + s.TopUps + s.UsageRows }

// Plan is every family's monthly plan; TopUp the size of one top-up.
const (
	Plan  = 20 << 30
	TopUp = 1 << 30
)

// Seed migrates db (MySQL dialect) and fills it with the population in
// multi-row INSERTs of 1,000 rows (not the per-row store API): families
// (every fifth with its own thresholds), members, a policy for about half of
// them, top-ups of the engine's current month for a fifth of the families, and
// the usage history (a tenth of it blocked, the last event of every fourth
// family crossing a threshold). Times follow the engine's clock. The tables
// it writes must hold none of these ids.
func Seed(ctx context.Context, db *sql.DB, eng *quota.Engine, pop Population) (Seeded, error) {
	if err := pop.defaults(); err != nil {
		return Seeded{}, err
	}
	start := time.Now()
	if err := store.Migrate(ctx, db); err != nil {
		return Seeded{}, err
	}
	// usage_record.created_at is the database's clock in the session's zone
	// (its DEFAULT CURRENT_TIMESTAMP(3)); write it the way the write-behind does.
	var offset int64
	if err := db.QueryRowContext(ctx, `SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW())`).Scan(&offset); err != nil {
		return Seeded{}, fmt.Errorf("recoverybench: session zone: %w", err)
	}
	g := generator{pop: pop, now: time.Now(), zone: time.Duration(offset) * time.Second}
	month, from, _ := eng.CurrentMonth()
	g.month, g.from = month, from
	if g.from.Before(g.now.Add(-30 * 24 * time.Hour)) {
		g.from = g.now.Add(-30 * 24 * time.Hour)
	}

	const chunk = 250 // families per statement group: 1,000 members, 5,000 usage rows
	var mu sync.Mutex
	var out Seeded
	var firstErr error
	next := 1
	var wg sync.WaitGroup
	for range pop.Writers {
		wg.Go(func() {
			conn, err := db.Conn(ctx)
			if err != nil {
				mu.Lock()
				firstErr = cmpErr(firstErr, err)
				mu.Unlock()
				return
			}
			defer conn.Close()
			for {
				mu.Lock()
				lo := next
				next += chunk
				stop := firstErr != nil
				mu.Unlock()
				if stop || lo > pop.Families {
					return
				}
				hi := min(lo+chunk-1, pop.Families)
				n, err := g.write(ctx, conn, lo, hi)
				mu.Lock()
				if err != nil {
					firstErr = cmpErr(firstErr, err)
				}
				out.Families += n.Families
				out.Members += n.Members
				out.Policies += n.Policies
				out.TopUps += n.TopUps
				out.UsageRows += n.UsageRows
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	out.Took = time.Since(start)
	if firstErr != nil {
		return out, fmt.Errorf("recoverybench: seed: %w", firstErr)
	}
	return out, nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

type generator struct {
	pop   Population
	now   time.Time
	zone  time.Duration // session zone − UTC
	month string
	from  time.Time // earliest event time
}

// HasPolicy says whether member c (1-based) of family f has a policy row.
func HasPolicy(f int64, c int) bool { return c > 1 && (f+int64(c))%2 == 0 }

// TopUps is how many top-ups family f has this month.
func TopUps(f int64) int {
	switch {
	case f%10 == 0:
		return 2
	case f%5 == 0:
		return 1
	}
	return 0
}

// Thresholds is family f's own thresholds, "" for the default.
func Thresholds(f int64) string {
	if f%5 == 0 {
		return "80,40"
	}
	return ""
}

func (g generator) write(ctx context.Context, conn *sql.Conn, lo, hi int) (Seeded, error) {
	var n Seeded
	ts := func(t time.Time) string { return "'" + t.UTC().Format("2006-01-02 15:04:05.000") + "'" }
	now := ts(g.now)
	var fam, mem, imsi, pol, top strings.Builder
	usage := []*strings.Builder{{}}
	rows := 0
	sep := func(b *strings.Builder) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
	}
	// usageRow is the statement the next usage row goes to (1,000 rows a
	// statement), separated from the row before.
	usageRow := func() *strings.Builder {
		b := usage[len(usage)-1]
		if rows == 1000 {
			b = &strings.Builder{}
			usage = append(usage, b)
			rows = 0
		}
		sep(b)
		rows++
		n.UsageRows++
		return b
	}
	for f := int64(lo); f <= int64(hi); f++ {
		fs := strconv.FormatInt(f, 10)
		thr := "NULL"
		if t := Thresholds(f); t != "" {
			thr = "'" + t + "'"
		}
		sep(&fam)
		fmt.Fprintf(&fam, "(%s,'family %s',%d,%s,%s,%s)", fs, fs, int64(Plan), thr, now, now)
		n.Families++
		for c := 1; c <= g.pop.MembersPerFamily; c++ {
			cid := f*10 + int64(c)
			role := policy.RoleMember
			if c == 1 {
				role = policy.RoleOwner
			}
			sep(&mem)
			fmt.Fprintf(&mem, "(%d,%s,'member %d','%s',%s,%s)", cid, fs, cid, role, now, now)
			sep(&imsi)
			fmt.Fprintf(&imsi, "('%s',%d,%s)", IMSI(cid), cid, now)
			n.Members++
			if HasPolicy(f, c) {
				sep(&pol)
				fmt.Fprintf(&pol, `(%d,%s,'{"%s":"%d"}',%d,0,%s)`, cid, fs, policy.KeyLimitMonthly, int64(2+c)<<30, 1+f%3, now)
				n.Policies++
			}
		}
		for i := range TopUps(f) {
			sep(&top)
			fmt.Fprintf(&top, "(%s,%d,'%s',0,%s)", fs, int64(TopUp>>i), g.month, now)
			n.TopUps++
		}
		used := int64(0)
		total := int64(Plan)
		for i := range TopUps(f) {
			total += TopUp >> i
		}
		R := g.pop.RowsPerFamily
		for r := range R {
			var at time.Time
			if r >= R-g.pop.Recent { // within the past 24 hours
				at = g.now.Add(-time.Duration(R-r)*5*time.Minute - time.Duration(f%997)*time.Millisecond)
			} else { // spread over the month before that (or its first hour)
				span := max(g.now.Add(-25*time.Hour).Sub(g.from), time.Hour)
				at = g.from.Add(span*time.Duration(r+1)/time.Duration(R-g.pop.Recent+1) - time.Duration(f%997)*time.Millisecond)
			}
			cid := f*10 + int64(r%g.pop.MembersPerFamily) + 1
			bytes := 1<<20 + (f*7919+int64(r)*104729)%(50<<20)
			result, rule, crossed := policy.Allowed, "", ""
			if r%10 == 9 {
				result, rule = policy.BlockedLimitMonthly, policy.KeyLimitMonthly
			} else {
				used += bytes
			}
			if r == R-1 && f%4 == 0 {
				crossed = store.FormatCrossed([]envelope.Crossing{{Percent: 50, Arm: 1}})
			}
			b := usageRow()
			fmt.Fprintf(b, "('rb-%s-%d',%s,%d,'com.example.app',%d,'%s',%d,'%s',%s,%s,%d,%d,%d,0,'%s')",
				fs, r, fs, cid, bytes, result, total-used, rule, ts(at), ts(at.Add(g.zone+500*time.Millisecond)),
				total, bytes, used, crossed)
		}
		// The months before: allowed events spread over the year before
		// the earliest event time, none of them in a month accepted now.
		year := g.from.AddDate(-1, 0, -2)
		for h := range g.pop.History {
			at := year.Add(g.from.AddDate(0, 0, -2).Sub(year)*time.Duration(h)/time.Duration(g.pop.History) + time.Duration(f%997)*time.Millisecond)
			b := usageRow()
			fmt.Fprintf(b, "('rb-%s-h%d',%s,%d,'com.example.app',%d,'%s',%d,'',%s,%s,%d,%d,%d,0,'')",
				fs, h, fs, f*10+int64(h%g.pop.MembersPerFamily)+1, 1<<20, policy.Allowed, int64(Plan), ts(at), ts(at.Add(g.zone+500*time.Millisecond)),
				int64(Plan), 1<<20, 1<<20)
		}
	}
	stmts := []string{
		"INSERT INTO families (id, name, plan_bytes, thresholds, created_at, updated_at) VALUES " + fam.String(),
		"INSERT INTO members (id, family_id, name, role, created_at, updated_at) VALUES " + mem.String(),
		"INSERT INTO member_imsi (imsi, member_id, updated_at) VALUES " + imsi.String(),
	}
	if pol.Len() > 0 {
		stmts = append(stmts, "INSERT INTO policy_assignment (customer_id, family_id, rules, version, updated_by, updated_at) VALUES "+pol.String())
	}
	if top.Len() > 0 {
		stmts = append(stmts, "INSERT INTO topups (family_id, bytes, month, created_by, created_at) VALUES "+top.String())
	}
	for _, b := range usage {
		stmts = append(stmts, `INSERT INTO usage_record (event_id, family_id, customer_id, app_id, bytes_used, process_result,
			remaining_after, rule, event_time, created_at, total_bytes, daily_used, monthly_used, throttle_kbps, crossed) VALUES `+b.String())
	}
	for _, s := range stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return n, err
		}
	}
	return n, nil
}

// IMSI is the IMSI the seeded member cid is provisioned with (member_imsi),
// so that a charging request naming imsi-<IMSI(cid)> finds it: MCC 450,
// MNC 99 (not a Korean network's), the member id as the MSIN.
func IMSI(cid int64) string { return fmt.Sprintf("45099%010d", cid) }
