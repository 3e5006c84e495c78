package store

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/policy"
)

// UsageQuery selects usage_record rows of one family (and, with CustomerID,
// one member) with event_time in [From, To).
type UsageQuery struct {
	FamilyID   int64
	CustomerID int64 // 0: the whole family
	From, To   time.Time
}

// UsageReport sums usage_record over a query: allowed bytes are what the
// pool was charged; blocked events are counted, not charged.
type UsageReport struct {
	Query UsageQuery
	// AllowedBytes is the sum of bytes of ALLOWED events and of grant
	// steps' charges; Events counts every judged event and grant step,
	// Blocked the blocked events.
	AllowedBytes    int64
	Events, Blocked int64
	// ByMember, ByApp and ByHour split AllowedBytes (and event counts);
	// hours are in the service time zone, ascending.
	ByMember []MemberUsage
	ByApp    []AppUsage
	ByHour   []HourUsage
}

// MemberUsage is one member's share of a report.
type MemberUsage struct {
	CustomerID   int64
	AllowedBytes int64
	Events       int64
	Blocked      int64
}

// AppUsage is one app's share of a report.
type AppUsage struct {
	AppID        string
	AllowedBytes int64
	Events       int64
}

// HourUsage is one hour's share of a report; Hour is its start in the
// service zone.
type HourUsage struct {
	Hour         time.Time
	AllowedBytes int64
	Events       int64
}

// MaxUsageRange is the longest period Usage reports (366 days, a leap year).
const MaxUsageRange = 366 * 24 * time.Hour

// Usage reports a family's or member's usage in a period of at most
// MaxUsageRange. It is one range
// scan of the usage_record index (family_id, event_time) — rows of other
// families are never read; a member's report reads its family's rows of
// the period, as the family's report does, and keeps the member's — summed in Go so
// hours follow the service zone in either dialect. usage_record holds one
// row per event id, so the sums are exact under replays. See doc/store.md.
func (s *Store) Usage(ctx context.Context, q UsageQuery) (UsageReport, error) {
	switch {
	case q.FamilyID <= 0:
		return UsageReport{}, invalid("familyId", "must be > 0")
	case q.From.IsZero() || q.To.IsZero() || !q.From.Before(q.To):
		return UsageReport{}, invalid("period", "from must be before to")
	case q.To.Sub(q.From) > MaxUsageRange:
		return UsageReport{}, invalid("period", "at most 366 days")
	}
	sqlq := `SELECT customer_id, app_id, bytes_used, process_result, event_time, grant_id FROM usage_record
		WHERE family_id = ? AND event_time >= ? AND event_time < ?`
	args := []any{q.FamilyID, s.t(q.From), s.t(q.To)}
	if q.CustomerID > 0 {
		sqlq += ` AND customer_id = ?`
		args = append(args, q.CustomerID)
	}
	rows, err := s.db.QueryContext(ctx, sqlq, args...)
	if err != nil {
		return UsageReport{}, dbErr("usage", err)
	}
	r := UsageReport{Query: q}
	members := map[int64]*MemberUsage{}
	apps := map[string]*AppUsage{}
	hours := map[time.Time]*HourUsage{}
	err = scanRows(rows, "usage", func(sc scanner) error {
		var cid, n int64
		var app, result, grant string
		var at sqldialect.NullTime
		if err := sc.Scan(&cid, &app, &n, &result, &at, &grant); err != nil {
			return err
		}
		// A grant step's charge is usage whatever its answer about the
		// next units.
		allowed := result == string(policy.Allowed) || grant != ""
		if !allowed {
			n = 0
		}
		r.Events++
		m := members[cid]
		if m == nil {
			m = &MemberUsage{CustomerID: cid}
			members[cid] = m
		}
		m.Events++
		m.AllowedBytes += n
		if !allowed {
			r.Blocked++
			m.Blocked++
		}
		r.AllowedBytes += n
		a := apps[app]
		if a == nil {
			a = &AppUsage{AppID: app}
			apps[app] = a
		}
		a.Events++
		a.AllowedBytes += n
		lt := at.Time.In(s.loc)
		h := time.Date(lt.Year(), lt.Month(), lt.Day(), lt.Hour(), 0, 0, 0, s.loc)
		hu := hours[h]
		if hu == nil {
			hu = &HourUsage{Hour: h}
			hours[h] = hu
		}
		hu.Events++
		hu.AllowedBytes += n
		return nil
	})
	if err != nil {
		return UsageReport{}, err
	}
	for _, m := range members {
		r.ByMember = append(r.ByMember, *m)
	}
	slices.SortFunc(r.ByMember, func(a, b MemberUsage) int { return cmp.Compare(a.CustomerID, b.CustomerID) })
	for _, a := range apps {
		r.ByApp = append(r.ByApp, *a)
	}
	slices.SortFunc(r.ByApp, func(a, b AppUsage) int {
		if a.AllowedBytes != b.AllowedBytes {
			return cmp.Compare(b.AllowedBytes, a.AllowedBytes)
		}
		return cmp.Compare(a.AppID, b.AppID)
	})
	for _, h := range hours {
		r.ByHour = append(r.ByHour, *h)
	}
	slices.SortFunc(r.ByHour, func(a, b HourUsage) int { return a.Hour.Compare(b.Hour) })
	return r, nil
}

// MonthRange returns the start and end of the month containing t in the
// service zone: the period of a monthly usage report.
func (s *Store) MonthRange(t time.Time) (from, to time.Time) {
	lt := t.In(s.loc)
	from = time.Date(lt.Year(), lt.Month(), 1, 0, 0, 0, 0, s.loc)
	return from, from.AddDate(0, 1, 0)
}
