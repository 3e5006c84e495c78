package charging

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// catalogPage is how many live sessions one read of a catalog change's
// scan takes.
const catalogPage = 500

// CatalogChanged asks the live sessions that hold a grant for an app's
// rating group (WithRatingGroups' app:<appId>) to report and ask again when
// the app catalog moved that app to another category between before and
// after (added, removed or recategorised): the app's grants were judged by
// its old category's blocks, and their next update is judged by the new
// one (the Charger names an app's category from the catalog, as for
// events). Category rating groups need nothing: a category's traffic is the
// same whichever apps the catalog puts in it.
//
// It returns at once. A worker of its own scans every live session, a page
// at a time, and queues a REAUTHORIZATION naming those rating groups to
// each session holding one, at the pace each SMF takes them. A scan's
// notifications fill at most half of an SMF's queue and wait behind the
// families' changes, which it so neither drops nor delays; an SMF whose
// queue stays full for a delivery attempt's timeout (WithNotifyDelivery)
// takes nothing, and the rest of its sessions' are dropped. When again >
// 0 it asks them once more again later: once every process's judges have
// read the edit (an update that reached another process before then was
// judged by its old catalog).
func (s *Service) CatalogChanged(before, after policy.Catalog, again time.Duration) {
	groups := map[uint32]bool{}
	for rg, cov := range s.o.groups {
		if cov.AppID != "" && before.Category(cov.AppID) != after.Category(cov.AppID) {
			groups[rg] = true
		}
	}
	if len(groups) == 0 {
		return
	}
	c := &s.catalog
	c.mu.Lock()
	defer c.mu.Unlock()
	due := time.Now().Add(again)
	for rg := range groups {
		c.now[rg] = true
		if again <= 0 {
			continue
		}
		// A rating group asked again already keeps its time (edits in a
		// row do not put the first one's off) and is asked once more for
		// the last edit when that time comes.
		l, ok := c.later[rg]
		if !ok {
			l.at = due
		}
		l.last = due
		c.later[rg] = l
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// catalogChanges are the rating groups whose live grants are to report
// again: now, and later once more.
type catalogChanges struct {
	mu    sync.Mutex
	now   map[uint32]bool
	later map[uint32]askLater
	wake  chan struct{}
	done  chan struct{}
}

// askLater is when a rating group is asked again (at), and when for the
// last edit that moved it (last: asked again then too, if later).
type askLater struct{ at, last time.Time }

// take returns the rating groups due now (moving in those asked later
// whose time has come) and when the next are due (zero: none waits).
func (c *catalogChanges) take(now time.Time) (map[uint32]bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	for rg, l := range c.later {
		if !now.Before(l.at) {
			c.now[rg] = true
			if !l.last.After(l.at) {
				delete(c.later, rg)
				continue
			}
			l.at = l.last
			c.later[rg] = l
		}
		if next.IsZero() || l.at.Before(next) {
			next = l.at
		}
	}
	due := c.now
	c.now = map[uint32]bool{}
	return due, next
}

// catalogLoop scans the live sessions for the catalog's changes until ctx
// ends.
func (s *Service) catalogLoop(ctx context.Context) {
	defer close(s.catalog.done)
	later := time.NewTimer(time.Hour)
	later.Stop()
	defer later.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.catalog.wake:
		case <-later.C:
		}
		due, next := s.catalog.take(time.Now())
		if !next.IsZero() {
			later.Reset(time.Until(next))
		}
		if len(due) == 0 {
			continue
		}
		if err := s.reauthorizeRatingGroups(ctx, due); err != nil && ctx.Err() == nil {
			s.o.log.Warn("charging: live grants of apps the catalog moved not all asked to report", "ratingGroups", len(due), "err", err)
		}
	}
}

// reauthorizeRatingGroups asks every live session holding a grant for one
// of groups to report again, naming those rating groups. A destination
// whose queue stayed full for a delivery attempt's timeout is skipped for
// the rest of the scan (its SMF takes nothing), and its drops are logged
// once at the end.
func (s *Service) reauthorizeRatingGroups(ctx context.Context, groups map[uint32]bool) error {
	since := s.o.now()
	stalled := map[string]int{} // destination → notifications dropped
	defer func() {
		for dest, n := range stalled {
			s.o.log.Warn("charging: an SMF took no notification of a catalog change for a delivery's timeout: the rest of its sessions' were dropped (their grants end at their validityTime)",
				"destination", dest, "dropped", n)
		}
	}()
	for after := ""; ; {
		page, err := s.sessions.OpenChargingSessionsAfter(ctx, after, catalogPage)
		if err != nil {
			return fmt.Errorf("charging: live sessions after %q: %w", after, err)
		}
		for _, sess := range page {
			if err := ctx.Err(); err != nil {
				return err
			}
			j, ok := reportJob(sess, func(g store.ChargingGrant) bool { return groups[g.RatingGroup] }, since)
			if !ok {
				continue
			}
			j.low = true
			dest := destKey(j.uri)
			wait := s.o.notifyTimeout
			if _, skip := stalled[dest]; skip {
				wait = 0
			}
			if !s.notifier.enqueueWithin(ctx, j, wait) && ctx.Err() == nil {
				stalled[dest]++
			}
		}
		if len(page) < catalogPage {
			return nil
		}
		after = page[len(page)-1].Ref
	}
}

// askToReport queues a REAUTHORIZATION of sess naming the rating groups of
// the grants it holds that held picks, if any (none when it has no
// notifyUri).
func (s *Service) askToReport(sess store.ChargingSession, held func(store.ChargingGrant) bool, since time.Time) {
	if j, ok := reportJob(sess, held, since); ok {
		s.notifier.enqueue(j)
	}
}

// reportJob is the REAUTHORIZATION of sess naming the rating groups of the
// grants it holds that held picks; false when there are none, or sess has
// no notifyUri.
func reportJob(sess store.ChargingSession, held func(store.ChargingGrant) bool, since time.Time) (notifyJob, bool) {
	if sess.NotifyURI == "" {
		return notifyJob{}, false
	}
	var picked []store.ChargingGrant
	for _, g := range sess.Grants {
		if held(g) {
			picked = append(picked, g)
		}
	}
	if len(picked) == 0 {
		return notifyJob{}, false
	}
	sess.Grants = picked
	return notifyJob{ref: sess.Ref, uri: sess.NotifyURI, body: reauthBody(sess), since: since}, true
}
