package charging

import (
	"slices"
	"strconv"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/service/store"
)

// A session's quotas — a rating group, on a UPF when the SMF names one
// (uPFID) — and the ids of their grants and steps.

// GrantID names the reservation of session ref for rating group rg across
// its steps (GrantIDOn with no UPF named).
func GrantID(ref string, rg uint32) string { return GrantIDOn(ref, rg, "") }

// GrantIDOn names the reservation of session ref for rating group rg on
// the UPF named upf (uPFID; "" for none) across its steps.
func GrantIDOn(ref string, rg uint32, upf string) string {
	return envelope.DerivedID("grt_", ref, quotaName(rg, upf))
}

// StepID names the step of session ref's invocation seq for rating group
// rg (StepIDOn with no UPF named).
func StepID(ref string, rg uint32, seq uint32) string { return StepIDOn(ref, rg, "", seq) }

// StepIDOn names the step of session ref's invocation seq for rating group
// rg on the UPF named upf: a retry of the invocation takes the same step,
// which the Charger answers from its record.
func StepIDOn(ref string, rg uint32, upf string, seq uint32) string {
	return envelope.DerivedID("grs_", ref, quotaName(rg, upf)+":seq:"+strconv.FormatUint(uint64(seq), 10))
}

// ExpiryStepID names the sweep's release of session ref's rating group rg
// (ExpiryStepIDOn with no UPF named).
func ExpiryStepID(ref string, rg uint32) string { return ExpiryStepIDOn(ref, rg, "") }

// ExpiryStepIDOn names the sweep's release of session ref's rating group
// rg on the UPF named upf.
func ExpiryStepIDOn(ref string, rg uint32, upf string) string {
	return envelope.DerivedID("grs_", ref, quotaName(rg, upf)+":expired")
}

// quotaName is what the ids of a rating group's quota derive from: the
// rating group, and the UPF when one is named (the ids of a quota without
// one are those of releases before uPFID was kept).
func quotaName(rg uint32, upf string) string {
	n := "rg:" + strconv.FormatUint(uint64(rg), 10)
	if upf != "" {
		n += ":upf:" + strconv.Quote(upf)
	}
	return n
}

// quotaKey is a session's quota: a rating group on a UPF.
type quotaKey struct {
	rg  uint32
	upf string
}

func (a ask) key() quotaKey { return quotaKey{a.rg, a.upf} }

// onUPFs names in asks the UPF of a rating group the request names without
// one, when the session holds that rating group on exactly one UPF (and
// not without one) and the request names it on no UPF itself: an SMF that
// named the UPF when it asked, and not in a later report, reports on that
// grant.
func onUPFs(held []store.ChargingGrant, asks []ask) []ask {
	for i, a := range asks {
		if a.upf != "" {
			continue
		}
		upf, n := "", 0
		for _, g := range held {
			if g.RatingGroup == a.rg {
				upf, n = g.UPFID, n+1
			}
		}
		if n != 1 || upf == "" || slices.ContainsFunc(asks, func(b ask) bool { return b.rg == a.rg && b.upf != "" }) {
			continue
		}
		asks[i].upf = upf
	}
	return asks
}

func grantKey(g store.ChargingGrant) quotaKey { return quotaKey{g.RatingGroup, g.UPFID} }
