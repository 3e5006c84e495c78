package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// WeeklyAt is when the weekly summary is sent: a weekday and a minute of
// the day, in the service zone.
type WeeklyAt struct {
	Day    time.Weekday
	Minute int
}

// ParseWeeklyAt reads DPCS_WEEKLY_SUMMARY: a weekday (MON … SUN) and a time
// HH:MM ("MON 09:00"), or "off" (nil).
func ParseWeeklyAt(s string) (*WeeklyAt, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "off") {
		return nil, nil
	}
	day, clock, ok := strings.Cut(s, " ")
	days := map[string]time.Weekday{"SUN": time.Sunday, "MON": time.Monday, "TUE": time.Tuesday, "WED": time.Wednesday,
		"THU": time.Thursday, "FRI": time.Friday, "SAT": time.Saturday}
	d, dok := days[strings.ToUpper(day)]
	var h, m int
	if !ok || !dok || len(strings.TrimSpace(clock)) != 5 {
		return nil, fmt.Errorf("%q: want a weekday and a time, e.g. MON 09:00, or off", s)
	}
	if _, err := fmt.Sscanf(strings.TrimSpace(clock), "%d:%d", &h, &m); err != nil || h < 0 || h > 23 || m < 0 || m > 59 {
		return nil, fmt.Errorf("%q: want a weekday and a time, e.g. MON 09:00, or off", s)
	}
	return &WeeklyAt{Day: d, Minute: h*60 + m}, nil
}

// Next is the first send time after t in loc.
func (w WeeklyAt) Next(t time.Time, loc *time.Location) time.Time {
	lt := t.In(loc)
	day := time.Date(lt.Year(), lt.Month(), lt.Day(), 0, 0, 0, 0, loc)
	for i := 0; i <= 7; i++ {
		d := day.AddDate(0, 0, i)
		at := time.Date(d.Year(), d.Month(), d.Day(), w.Minute/60, w.Minute%60, 0, 0, loc)
		if d.Weekday() == w.Day && at.After(t) {
			return at
		}
	}
	return day.AddDate(0, 0, 7) // not reached: some day of the next 8 is the weekday
}

// WeekBefore is the week (Monday to Sunday, in loc) before the one at t
// falls in: its first instant and the next week's, and its ISO name.
func WeekBefore(t time.Time, loc *time.Location) (from, to time.Time, week string) {
	lt := t.In(loc)
	monday := time.Date(lt.Year(), lt.Month(), lt.Day(), 0, 0, 0, 0, loc).AddDate(0, 0, -(int(lt.Weekday())+6)%7)
	from, to = monday.AddDate(0, 0, -7), monday
	y, w := from.ISOWeek()
	return from, to, fmt.Sprintf("%04d-W%02d", y, w)
}

// WeeklySummaries sends every family's owners a summary of the week before
// (notify.KindWeeklySummary: usage per member, blocks, requests) at the
// operator's time (DPCS_WEEKLY_SUMMARY), to the inbox, the live streams and
// Web Push. It runs in the API deployables; each family's summary of a week
// is stored once (the inbox's dedupe key), and only the process that stored
// it sends it on, so several servers send it once. A process started after
// this week's time sends what is missing a minute later. Close stops it.
type WeeklySummaries struct {
	st    *store.Store
	inbox notify.Store
	live  LivePublisher
	push  notify.Channel
	at    WeeklyAt
	loc   *time.Location
	now   func() time.Time
	log   *slog.Logger
	// catchUp is how long a process waits after it starts before it sends
	// a week's missing summaries: a starting server has its own work first.
	catchUp time.Duration

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// WeeklyReport is what one run did.
type WeeklyReport struct {
	Week                   string
	Families, Sent, Failed int
	// Skipped are the families whose summary was stored before (by
	// another server or an earlier run), found so before summing.
	Skipped int
}

// NewWeeklySummaries returns the job (not started) over the truth st, the
// inbox, the live publisher and the push channel (nil: no push).
func NewWeeklySummaries(st *store.Store, inbox notify.Store, live LivePublisher, push notify.Channel, at WeeklyAt,
	loc *time.Location, log *slog.Logger) (*WeeklySummaries, error) {
	if st == nil || inbox == nil || live == nil {
		return nil, errors.New("service: weekly summaries need a store, an inbox and a live publisher")
	}
	if loc == nil {
		loc = time.UTC
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &WeeklySummaries{st: st, inbox: inbox, live: live, push: push, at: at, loc: loc, now: time.Now, log: log, catchUp: time.Minute}, nil
}

// Start runs the job in a goroutine of its own until Close: a minute
// after the start for a week whose time has passed (what is missing is
// sent), then at every weekly time.
func (w *WeeklySummaries) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel, w.done = cancel, make(chan struct{})
	go func() {
		defer close(w.done)
		// The week in which a process starts after the time: its summaries
		// may be missing (no process ran then). Sent a minute after the
		// start, not in the middle of it.
		if now := w.now(); w.at.Next(now.AddDate(0, 0, -7), w.loc).Before(now) {
			t := time.NewTimer(w.catchUp)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			w.run(ctx, w.now())
		}
		for {
			next := w.at.Next(w.now(), w.loc)
			t := time.NewTimer(time.Until(next))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
				w.run(ctx, next)
			}
		}
	}()
}

func (w *WeeklySummaries) run(ctx context.Context, at time.Time) {
	r, err := w.Run(ctx, at)
	if err != nil && ctx.Err() == nil {
		w.log.WarnContext(ctx, "weekly summaries: stopped early", "week", r.Week, "err", err)
	}
	w.log.InfoContext(ctx, "weekly summaries", "week", r.Week, "families", r.Families, "sent", r.Sent,
		"storedBefore", r.Skipped, "failed", r.Failed)
}

// Close stops the job and waits for it: a run in progress ends after the
// family it is at. It is idempotent.
func (w *WeeklySummaries) Close() {
	w.once.Do(func() {
		if w.cancel != nil {
			w.cancel()
			<-w.done
		}
	})
}

// weeklySegments is how many ranges of family ids a run walks, each in
// an order of its own (Run).
const weeklySegments = 64

// Run sends the summaries of the week before the one at falls in to every
// family that has none yet; one family failing does not stop the others.
//
// Every API server runs the job at the same time. Each walks the families
// in weeklySegments ranges of ids, the ranges in a random order of its
// own, so that servers mostly sum different families: a family another
// server stored first is skipped at its stored key (WeeklyReport.Skipped),
// and two servers sum the same family only when they happen to walk the
// same range at once. (Walked in id order by all, the servers went in
// step, every one of them summing every family.)
func (w *WeeklySummaries) Run(ctx context.Context, at time.Time) (WeeklyReport, error) {
	from, to, week := WeekBefore(at, w.loc)
	r := WeeklyReport{Week: week}
	lo, hi, ok, err := w.st.FamilyIDRange(ctx)
	if err != nil || !ok {
		return r, err
	}
	segs := idSegments(lo, hi, weeklySegments)
	for _, k := range rand.Perm(len(segs)) {
		if err := w.segment(ctx, segs[k], from, to, week, &r); err != nil {
			return r, err
		}
	}
	return r, nil
}

// idSegment is the family ids from first to last, both included.
type idSegment struct{ first, last int64 }

// idSegments splits [lo, hi] into at most n ranges of about equal width;
// the last one is open-ended, so a family created during the run (an id
// beyond hi) is walked too.
func idSegments(lo, hi int64, n int) []idSegment {
	width := max((hi-lo)/int64(n)+1, 1)
	var segs []idSegment
	for first := lo; ; first += width {
		if first > hi-width || len(segs) == n-1 {
			return append(segs, idSegment{first, math.MaxInt64})
		}
		segs = append(segs, idSegment{first, first + width - 1})
	}
}

// segment sends the summaries of the families of seg.
func (w *WeeklySummaries) segment(ctx context.Context, seg idSegment, from, to time.Time, week string, r *WeeklyReport) error {
	const page = 500
	after := seg.first - 1
	for {
		ids, err := w.st.FamilyIDs(ctx, after, page)
		if err != nil {
			return err
		}
		for _, fid := range ids {
			if fid > seg.last {
				return nil
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			r.Families++
			sent, before, err := w.family(ctx, fid, from, to, week)
			switch {
			case before:
				r.Skipped++
			case err != nil:
				r.Failed++
				w.log.WarnContext(ctx, "weekly summary not sent", "family", fid, "week", week, "err", err)
			case sent:
				r.Sent++
			}
		}
		if len(ids) < page {
			return nil
		}
		after = ids[len(ids)-1]
	}
}

// Family sends family fid's summary of [from, to) (ISO week week) unless it
// was stored before or nothing happened in the week (no use, no block, no
// request): it reports whether this call stored and sent it.
func (w *WeeklySummaries) Family(ctx context.Context, fid int64, from, to time.Time, week string) (bool, error) {
	sent, _, err := w.family(ctx, fid, from, to, week)
	return sent, err
}

// family is Family, and whether the summary was found stored before
// (another server or an earlier run stored it; nothing was summed).
func (w *WeeklySummaries) family(ctx context.Context, fid int64, from, to time.Time, week string) (sent, before bool, err error) {
	// Stored before (another server, an earlier run): nothing to sum.
	if has, ok := w.inbox.(interface {
		HasDedupeKey(ctx context.Context, key string) (bool, error)
	}); ok {
		if done, err := has.HasDedupeKey(ctx, notify.WeeklySummaryKey(fid, week)); err != nil || done {
			return false, done, err
		}
	}
	s, err := w.summary(ctx, fid, from, to, week)
	if err != nil {
		return false, false, err
	}
	if s.UsedBytes == 0 && s.Blocked == 0 && s.Requests.Made == 0 {
		return false, false, nil // a week in which nothing happened is not told
	}
	n, err := notify.WeeklySummaryNotification(s, w.now(), notify.Korean)
	if err != nil {
		return false, false, err
	}
	stored, inserted, err := w.inbox.Add(ctx, n)
	if err != nil || !inserted {
		return false, false, err // stored meanwhile: whoever stored it sends it
	}
	if _, err := w.live.Publish(ctx, stored); err != nil {
		w.log.WarnContext(ctx, "weekly summary: not told live to every process", "family", fid, "err", err)
	}
	if w.push != nil {
		if err := w.push.Send(ctx, stored); err != nil {
			w.log.WarnContext(ctx, "weekly summary: push failed", "family", fid, "err", err)
		}
	}
	return true, false, w.inbox.MarkDelivered(ctx, stored.ID, w.now())
}

// summary sums family fid's week: its members' use and blocks (the usage
// records of [from, to)) and the requests made in it.
func (w *WeeklySummaries) summary(ctx context.Context, fid int64, from, to time.Time, week string) (notify.WeeklySummary, error) {
	s := notify.WeeklySummary{FamilyID: fid, Week: week, From: from.In(w.loc).Format(time.DateOnly),
		To: to.In(w.loc).AddDate(0, 0, -1).Format(time.DateOnly), Members: []notify.WeeklySummaryMember{}}
	members, err := w.st.ListMembers(ctx, fid, false)
	if err != nil {
		return s, err
	}
	u, err := w.st.Usage(ctx, store.UsageQuery{FamilyID: fid, From: from, To: to})
	if err != nil {
		return s, err
	}
	s.UsedBytes, s.Blocked = u.AllowedBytes, u.Blocked
	used := make(map[int64]store.MemberUsage, len(u.ByMember))
	for _, m := range u.ByMember {
		used[m.CustomerID] = m
	}
	for _, m := range members {
		mu := used[m.ID]
		s.Members = append(s.Members, notify.WeeklySummaryMember{CustomerID: m.ID, Name: m.Name, Role: string(m.Role),
			UsedBytes: mu.AllowedBytes, Blocked: mu.Blocked})
	}
	// Most used first; a child before a parent when equal.
	slices.SortStableFunc(s.Members, func(a, b notify.WeeklySummaryMember) int {
		if c := cmp.Compare(b.UsedBytes, a.UsedBytes); c != 0 {
			return c
		}
		child := func(m notify.WeeklySummaryMember) int {
			if m.Role == string(policy.RoleMember) {
				return 0
			}
			return 1
		}
		return cmp.Compare(child(a), child(b))
	})
	reqs, err := w.st.DataRequests(ctx, store.DataRequestQuery{FamilyID: fid, Limit: 500})
	if err != nil {
		return s, err
	}
	for _, r := range reqs {
		if r.CreatedAt.Before(from) || !r.CreatedAt.Before(to) {
			continue
		}
		s.Requests.Made++
		switch r.Status {
		case store.RequestApproved:
			s.Requests.Approved++
		case store.RequestDeclined:
			s.Requests.Declined++
		}
	}
	return s, nil
}
