package charging

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/store"
)

// sweepBatch is how many expired sessions one pass of a sweep reads.
const sweepBatch = 500

// sweepLoop sweeps every sweepEvery until ctx ends.
func (s *Service) sweepLoop(ctx context.Context) {
	defer close(s.sweepDone)
	if s.o.sweepEvery <= 0 {
		return
	}
	t := time.NewTicker(s.o.sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
				s.o.log.Warn("charging: sweep of expired sessions failed; trying again next time", "err", err)
			}
		}
	}
}

// Sweep closes every session the SMF stopped updating — OPEN past its
// expiry (its last answer's longest validityTime plus the quotaHoldingTime)
// — and returns the reservations its grants hold through the Charger; and
// deletes the sessions closed longer ago than the retention. A session
// whose release fails stays CLOSING and is released by the next sweep. It
// reports how many sessions it closed.
func (s *Service) Sweep(ctx context.Context) (SweepInfo, error) {
	var info SweepInfo
	now := s.o.now()
	for {
		expired, err := s.sessions.ExpiredChargingSessions(ctx, now, sweepBatch)
		if err != nil {
			info.Err = err
			break
		}
		progress := false
		for _, sess := range expired {
			closed, err := s.expire(ctx, sess)
			switch {
			case err != nil:
				info.Failed++
				info.Err = errors.Join(info.Err, err)
			case closed:
				info.Closed++
				progress = true
			}
		}
		if len(expired) < sweepBatch || !progress {
			break
		}
	}
	if info.Err == nil {
		info.Purged, info.Err = s.sessions.PurgeChargingSessions(ctx, now.Add(-s.o.retention), 10_000)
	}
	if s.o.hooks.OnSweep != nil {
		s.o.hooks.OnSweep(info)
	}
	return info, info.Err
}

// expire closes one expired session: CLOSING (unless a step came
// meanwhile), every grant it holds then released, CLOSED. The grants are
// read again once the session is CLOSING: a step that began before
// (here or in another process) may have added a rating group since the
// sweep's read (SetChargingGrants, which keeps last_seq), and a CLOSING
// session's grants change no more.
func (s *Service) expire(ctx context.Context, listed store.ChargingSession) (bool, error) {
	unlock, err := s.lock(ctx, listed.Ref)
	if err != nil {
		return false, err
	}
	defer unlock()
	s.cache.drop(listed.Ref) // closing, or stepped meanwhile: the next step reads SQL
	if listed.State == store.ChargingOpen {
		ok, err := s.sessions.BeginClosingChargingSession(ctx, listed.Ref, listed.LastSeq)
		if err != nil || !ok {
			return false, err
		}
	}
	sess, err := s.sessions.ChargingSession(ctx, listed.Ref)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if sess.State != store.ChargingClosing { // another sweep closed it meanwhile
		return false, nil
	}
	if len(sess.Grants) > 0 {
		ops := make([]quota.GrantOp, len(sess.Grants))
		now := s.o.now()
		for i, g := range sess.Grants {
			cov := s.o.groups.Of(g.RatingGroup)
			ops[i] = quota.GrantOp{ID: ExpiryStepIDOn(sess.Ref, g.RatingGroup, g.UPFID), GrantID: g.GrantID, FamilyID: sess.FamilyID,
				CustomerID: sess.MemberID, AppID: cov.AppID, Category: cov.Category, Release: true, At: now}
		}
		res, err := s.charger.Charge(ctx, ops)
		if err != nil {
			return false, fmt.Errorf("charging: release expired session %s: %w", sess.Ref, err)
		}
		if len(res) != len(ops) {
			return false, fmt.Errorf("charging: release expired session %s: %d steps answered with %d results", sess.Ref, len(ops), len(res))
		}
	}
	if err := s.sessions.FinishClosingChargingSession(ctx, sess.Ref); err != nil {
		return false, err
	}
	s.aborted(sess)
	return true, nil
}
