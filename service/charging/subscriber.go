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
// served GPSI's MSISDN; and the identity that named it.
func (s *Service) subscriber(ctx context.Context, req *ChargingDataRequest) (store.Member, string, error) {
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
				return store.Member{}, "", badParam(CauseMandatoryIEIncorrect, "/subscriberIdentifier", "must be imsi-<5 to 15 digits> or msisdn-<digits>")
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
			return m, id, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return store.Member{}, "", err
		}
	}
	return store.Member{}, "", &Problem{Status: http.StatusNotFound, Cause: CauseUserUnknown,
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

// Reidentified checks, in the background (for hooks that must not block,
// as Changed), the live sessions of the members named: a session whose
// subscriber identity no longer names its member — an IMSI an operator
// took off the member or gave another — is closed as the sweep closes one
// (its grants returned, ABORT_CHARGING to its SMF), so that no traffic is
// charged to a member the network no longer names. Call it after a
// member's IMSI changed.
func (s *Service) Reidentified(familyID int64, memberIDs ...int64) {
	s.changes.add(func(c *changes) {
		members := c.reidentify[familyID]
		if members == nil {
			members = map[int64]bool{}
			c.reidentify[familyID] = members
		}
		for _, m := range memberIDs {
			members[m] = true
		}
	})
}

// reidentify closes the live sessions of member mid of family fid whose
// subscriber identity names another member, or nobody, now.
func (s *Service) reidentify(ctx context.Context, fid, mid int64) error {
	live, err := s.sessions.LiveChargingSessions(ctx, fid, mid)
	if err != nil {
		return err
	}
	var errs []error
	for _, sess := range live {
		m, _, err := s.subscriber(ctx, &ChargingDataRequest{SubscriberIdentifier: sess.Subscriber})
		var p *Problem
		switch {
		case err == nil && m.ID == sess.MemberID:
			continue
		case err != nil && !(errors.As(err, &p) && p.Cause == CauseUserUnknown):
			errs = append(errs, err)
			continue
		}
		if _, err := s.expire(ctx, sess); err != nil {
			errs = append(errs, err)
			continue
		}
		s.o.log.Info("charging: a session whose subscriber no longer names its member closed", "ref", sess.Ref,
			"familyId", fid, "memberId", mid)
	}
	return errors.Join(errs...)
}
