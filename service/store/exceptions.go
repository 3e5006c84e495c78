package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dabom/dpcs/policy"
)

// Exceptions: a downtime or an app's block lifted for some minutes, by an
// owner or an approved request.

// GrantException lifts a member's downtime (kind TIME: EXCEPT:TIME) or an
// app's block or daily budget (kind APP: EXCEPT:APP:<app>) for minutes from now — or from
// the end of the exception in effect, which it extends: an owner's grant
// ("30분 더" tapped twice is an hour) — through the
// policy write path (version + 1, audit, policy-updated event). It returns
// the policy update (push it to the quota engine at once) and the local
// time YYYYMMDDHHMM the exception ends at, the minute after now + minutes.
// An owner grants one without a request ("30분 더"); an approved TIME or
// APP request grants one too.
func (s *Store) GrantException(ctx context.Context, fid, cid int64, kind, app string, minutes int64, by Actor) (PolicyUpdate, string, error) {
	var up PolicyUpdate
	var until string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		up, until, err = s.grantException(ctx, tx, fid, cid, kind, app, minutes, by, true)
		return err
	})
	return up, until, err
}

// grantException is GrantException inside tx. extend (an owner's grant)
// adds minutes to the end of the exception in effect; an approved request
// (extend false) ends at the later of that end and now + minutes, so
// several requests for 30 minutes approved together give 30 minutes, not
// their sum. Refusals name the request (requestId) when there is one, else
// the grant's field (kind, appId).
func (s *Store) grantException(ctx context.Context, tx *sql.Tx, fid, cid int64, kind, app string, minutes int64, by Actor, extend bool) (PolicyUpdate, string, error) {
	if minutes < 1 || minutes > MaxRequestMinutes {
		return PolicyUpdate{}, "", invalid("minutes", "must be 1 to %d minutes", MaxRequestMinutes)
	}
	key := policy.KeyExceptTime
	switch kind {
	case KindTime:
	case KindApp:
		key = policy.KeyExceptAppPrefix + app
	default:
		return PolicyUpdate{}, "", invalid("kind", "must be TIME or APP")
	}
	field := func(direct string) string {
		if extend {
			return direct
		}
		return "requestId"
	}
	if _, err := s.currentMember(ctx, tx, fid, cid, s.d.ForUpdate()); err != nil {
		if errors.Is(err, ErrNotFound) && !extend {
			return PolicyUpdate{}, "", conflict("requestId", "the member who asked is no longer in the family: decline the request", err)
		}
		return PolicyUpdate{}, "", err
	}
	cur, err := s.policy(ctx, tx, fid, cid, s.d.ForUpdate())
	if err != nil {
		return PolicyUpdate{}, "", err
	}
	c, err := policy.ParseConstraints(cur.Rules)
	if err != nil {
		return PolicyUpdate{}, "", fmt.Errorf("store: policy of member %d: %w", cid, err)
	}
	now := s.now()
	mo := policy.MomentOf(now, s.loc)
	switch {
	case kind == KindTime && c.Night == nil && len(c.Windows) == 0:
		return PolicyUpdate{}, "", conflict(field("kind"), "the member has no downtime, so there is nothing to lift", nil)
	case kind == KindApp:
		blocked, err := s.appBlocked(ctx, tx, c, app)
		if err != nil {
			return PolicyUpdate{}, "", err
		}
		if !blocked {
			return PolicyUpdate{}, "", conflict(field("appId"), "the app is not blocked for the member, so there is nothing to lift", nil)
		}
	}
	// The end of the exception in effect, if any.
	var held time.Time
	cur0 := c.TimeException
	if kind == KindApp {
		cur0 = c.AppExceptions[app]
	}
	if cur0 != "" && cur0 > mo.Stamp() {
		if t, err := time.ParseInLocation("200601021504", cur0, s.loc); err == nil && t.After(now) {
			held = t
		}
	}
	var end time.Time
	switch {
	case extend && !held.IsZero():
		end = held.Add(time.Duration(minutes) * time.Minute)
	default:
		end = now.Add(time.Duration(minutes) * time.Minute)
	}
	// Whole minutes, rounded up: 30 minutes granted at 22:10:40 end at 22:41.
	if t := end.Truncate(time.Minute); t.Before(end) {
		end = t.Add(time.Minute)
	}
	if end.Before(held) {
		end = held // an approval never shortens what is in effect
	}
	until := policy.MomentOf(end, s.loc).Stamp()
	var up PolicyUpdate
	err = s.writePolicy(ctx, tx, PolicyChange{FamilyID: fid, CustomerID: cid, Set: map[string]string{key: until}, By: by}, "policy.update", 0, &up)
	return up, until, err
}

// appBlocked reports whether c blocks or limits app — what an app
// exception lifts: its own block or daily data budget, or its category's
// in the operator's catalog (app_catalog; an app it does not know is in no
// category).
func (s *Store) appBlocked(ctx context.Context, q querier, c policy.Constraints, app string) (bool, error) {
	if _, budget := c.AppBudgets[app]; budget || slices.Contains(c.BlockedApps, app) {
		return true, nil
	}
	if len(c.BlockedCategories) == 0 && len(c.CategoryBudgets) == 0 {
		return false, nil
	}
	apps, err := readApps(ctx, q)
	if err != nil {
		return false, err
	}
	for _, a := range apps {
		if a.ID == app {
			_, budget := c.CategoryBudgets[a.Category]
			return budget || slices.Contains(c.BlockedCategories, a.Category), nil
		}
	}
	return false, nil
}
