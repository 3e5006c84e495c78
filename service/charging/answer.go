package charging

import (
	"net/url"
	"strings"
	"time"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// CrowdedRetry is the validityTime of a grant crowded out by the family's
// other grants (nothing granted, not final): the SMF asks again then, when
// the grants the engine named to shrink (a REAUTHORIZATION each) have
// reported.
const CrowdedRetry = 10 * time.Second

// answer is one rating group's answer to its step, and until when it
// holds.
func (s *Service) answer(a ask, r quota.GrantResult, now time.Time) (MultipleUnitInformation, time.Time) {
	validity := s.o.validity
	if r.Granted <= 0 && !r.Final {
		validity = min(validity, CrowdedRetry)
	}
	until := now.Add(validity)
	if !r.ValidUntil.IsZero() && r.ValidUntil.Before(until) {
		until = r.ValidUntil
	}
	// Whole seconds rounded down: the SMF asks again a little before the
	// boundary, never after it (at least 1 s, the least validityTime).
	secs := max(int64(until.Sub(now)/time.Second), 1)
	until = now.Add(time.Duration(secs) * time.Second)
	holding := int64(s.o.holding / time.Second)
	mui := MultipleUnitInformation{RatingGroup: a.rg, UPFID: a.upf, ValidityTime: &secs, QuotaHoldingTime: &holding}
	granted := uint64(max(r.Granted, 0))
	mui.GrantedUnit = &GrantedUnit{TotalVolume: &granted}
	switch {
	case r.Decision == policy.Allowed && r.Granted > 0:
		mui.ResultCode = ResultSuccess
		if r.Final {
			mui.FinalUnitIndication = s.final(r)
		} else if s.o.thresholdPercent > 0 {
			th := granted * uint64(s.o.thresholdPercent) / 100
			mui.VolumeQuotaThreshold = &th
		}
	case r.Decision == policy.Allowed: // nothing left to grant
		mui.ResultCode = ResultQuotaLimitReached
		if r.Final {
			mui.FinalUnitIndication = s.final(r)
		}
	default:
		mui.ResultCode = ResultEndUserServiceDenied
		switch r.Decision {
		case policy.BlockedFamilyQuota, policy.BlockedLimitDaily, policy.BlockedLimitMonthly:
			mui.ResultCode = ResultQuotaLimitReached
		}
		// Not final: the others' reservations hold what is left (crowded
		// out); asked again at validityTime, it gets at least its share.
		if r.Final {
			mui.FinalUnitIndication = s.final(r)
		}
	}
	return mui, until
}

// final is what the SMF does once the last units are used: RESTRICT_ACCESS
// for a throttled member, REDIRECT to the block screen when one is set,
// TERMINATE otherwise.
func (s *Service) final(r quota.GrantResult) *FinalUnitIndication {
	switch {
	case r.Decision == policy.Allowed && r.ThrottleKbps > 0:
		return &FinalUnitIndication{FinalUnitAction: ActionRestrictAccess, FilterID: s.o.restrictFilter}
	case s.o.redirectURL != "":
		reason := string(r.Decision)
		if r.Decision == policy.Allowed {
			reason = string(policy.BlockedFamilyQuota) // the last units: what follows is the pool's end
		}
		sep := "?"
		if strings.Contains(s.o.redirectURL, "?") {
			sep = "&"
		}
		return &FinalUnitIndication{FinalUnitAction: ActionRedirect, RedirectServer: &RedirectServer{
			RedirectAddressType: RedirectAddressURL, RedirectServerAddress: s.o.redirectURL + sep + "reason=" + url.QueryEscape(reason)}}
	}
	return &FinalUnitIndication{FinalUnitAction: ActionTerminate}
}
