package charging

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
)

// ask is one rating group's part of a request, in bytes.
type ask struct {
	rg uint32
	// upf is the UPF whose quota it is (uPFID; "" when not named): the
	// same rating group on two UPFs is two grants.
	upf       string
	used      int64
	requested int64
	release   bool // no requestedUnit: charge used, hold nothing more
	inAnswer  bool // the request named it: the answer does too
}

// asks reads the request's rating groups.
func (s *Service) asks(req *ChargingDataRequest) ([]ask, *Problem) {
	out := make([]ask, 0, len(req.MultipleUnitUsage))
	for i, u := range req.MultipleUnitUsage {
		at := "/multipleUnitUsage/" + strconv.Itoa(i)
		a := ask{rg: *u.RatingGroup, upf: u.UPFID, inAnswer: true}
		for j, c := range u.UsedUnitContainer {
			v, ok := volume(c.TotalVolume, c.UplinkVolume, c.DownlinkVolume)
			if !ok || v > uint64(policy.MaxBytes) || a.used+int64(v) > policy.MaxBytes {
				return nil, badParam(CauseOptionalIEIncorrect, at+"/usedUnitContainer/"+strconv.Itoa(j)+"/totalVolume",
					fmt.Sprintf("a rating group's usage must total at most %d bytes", policy.MaxBytes))
			}
			a.used += int64(v)
		}
		if u.RequestedUnit == nil {
			a.release = true
		} else {
			v, _ := volume(u.RequestedUnit.TotalVolume, u.RequestedUnit.UplinkVolume, u.RequestedUnit.DownlinkVolume)
			switch {
			case u.RequestedUnit.TotalVolume == nil && u.RequestedUnit.UplinkVolume == nil && u.RequestedUnit.DownlinkVolume == nil:
				a.requested = s.o.grant // the CHF decides
			case v == 0:
				a.release = true
			default:
				a.requested = int64(min(v, uint64(s.o.max)))
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// volume is total, or uplink + downlink when total is absent; false when
// the sum overflows.
func volume(total, up, down *uint64) (uint64, bool) {
	if total != nil {
		return *total, true
	}
	var v uint64
	for _, p := range []*uint64{up, down} {
		if p != nil {
			if v+*p < v {
				return 0, false
			}
			v += *p
		}
	}
	return v, true
}

// createKey names a create by what its retries repeat: the subscriber, the
// consumer, the charging ids and the PDU session, and the invocation; ""
// when it carries no charging id (then nothing tells a retry from a new
// session, and each create is a session).
func createKey(req *ChargingDataRequest) string {
	var ids []string
	if req.ChargingID != nil {
		ids = append(ids, "c"+strconv.FormatUint(uint64(*req.ChargingID), 10))
	}
	if p := req.PDUSessionChargingInformation; p != nil {
		if p.ChargingID != nil {
			ids = append(ids, "p"+strconv.FormatUint(uint64(*p.ChargingID), 10))
		}
		if p.SMFChargingID != "" {
			ids = append(ids, "s"+p.SMFChargingID)
		}
		if p.PDUSessionInformation != nil && p.PDUSessionInformation.PDUSessionID != nil {
			ids = append(ids, "u"+strconv.Itoa(int(*p.PDUSessionInformation.PDUSessionID)))
		}
	}
	if len(ids) == 0 {
		return ""
	}
	id := req.NfConsumerIdentification
	return envelope.DerivedID("", strings.Join([]string{req.SubscriberIdentifier, id.NFName, id.NFFqdn, id.NFIPv4Address,
		id.NFIPv6Address, strings.Join(ids, "/"), strconv.FormatUint(uint64(*req.InvocationSequenceNumber), 10)}, "\x00"), "create")
}
