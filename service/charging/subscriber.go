package charging

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/dabom/dpcs/service/store"
)

// Who a request is about: the member the subscriber names (its IMSI, else
// its MSISDN as the member's phone) and the consumer that sent it.

// subscriber finds the member req names: its subscriberIdentifier (an IMSI
// an operator set on a member, or an MSISDN, the member's phone), else the
// served GPSI's MSISDN.
func (s *Service) subscriber(ctx context.Context, req *ChargingDataRequest) (store.Member, error) {
	ids := []string{req.SubscriberIdentifier}
	if p := req.PDUSessionChargingInformation; p != nil && p.UserInformation != nil && p.UserInformation.ServedGPSI != "" {
		ids = append(ids, p.UserInformation.ServedGPSI)
	}
	for i, id := range ids {
		var m store.Member
		var err error
		kind, digits, _ := strings.Cut(id, "-")
		if !allDigits(digits) {
			if i == 0 && (kind == "imsi" || kind == "msisdn") {
				return store.Member{}, badParam(CauseMandatoryIEIncorrect, "/subscriberIdentifier", "must be imsi-<5 to 15 digits> or msisdn-<digits>")
			}
			continue
		}
		switch {
		case kind == "imsi" && len(digits) >= 5 && len(digits) <= 15:
			m, err = s.sessions.MemberByIMSI(ctx, digits)
		case kind == "msisdn" && len(digits) >= 5 && len(digits) <= 15:
			m, err = s.sessions.MemberByMSISDN(ctx, digits)
		default:
			continue
		}
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return store.Member{}, err
		}
	}
	return store.Member{}, &Problem{Status: http.StatusNotFound, Cause: CauseUserUnknown,
		Detail: "no current family member has this subscriber's identity: set the member's phone (its MSISDN) or its IMSI"}
}

func allDigits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

// consumer names the NF consumer for the session's record.
func consumer(id *NFIdentification) string {
	for _, s := range []string{id.NFName, id.NFFqdn, id.NFIPv4Address, id.NFIPv6Address} {
		if s != "" {
			return truncate(s, store.MaxConsumerLen)
		}
	}
	return id.NodeFunctionality
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
