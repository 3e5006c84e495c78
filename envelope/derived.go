package envelope

import "fmt"

// The notifications a usage-persist record stands for (doc/wire-format.md,
// "One record per decision"). A decision is one usage-persist record; its
// member notifies names the live notifications the producer did not send
// as records of their own, and the notifier derives them here, exactly as
// the producer built them before: same ids, same timestamps, same payloads.

// Purposes of the ids derived from a decision's origin event id
// (DerivedID(PrefixNotification, origin, purpose)).
const (
	PurposeQuotaUpdated    = "quota-updated"
	PurposeCustomerBlocked = "customer-blocked"
)

// PersistNotifications returns the notifications e stands for, in the
// order its member notifies names them (none when it names none): a
// QUOTA_UPDATED with the pool after the decision (remainingAfter, the
// used share of totalBytes, dailyUsedBytes), a CUSTOMER_BLOCKED with the
// rule that decided it (rule, processResult, blocked at the record's
// timestamp). Each id is DerivedID(PrefixNotification, originEventId,
// PurposeQuotaUpdated or PurposeCustomerBlocked) and each timestamp the
// record's, so a redelivered record derives identical notifications. An
// error (a *FieldError) says why a notification cannot be built: a block
// without a rule, a kind a record cannot stand for.
func PersistNotifications(e Envelope[UsagePersistPayload]) ([]Envelope[Notification], error) {
	p := e.Payload
	out := make([]Envelope[Notification], 0, len(p.Notifies))
	for _, k := range p.Notifies {
		var n Notification
		var purpose string
		switch SubType(k) {
		case SubQuotaUpdated:
			purpose = PurposeQuotaUpdated
			n = QuotaUpdated{FamilyID: p.FamilyID, CustomerID: p.CustomerID, FamilyRemainingBytes: p.RemainingAfter,
				FamilyUsedPercent: UsedPercent(p.TotalBytes, p.RemainingAfter), CustomerUsedBytesToday: p.DailyUsedBytes}
		case SubCustomerBlocked:
			purpose = PurposeCustomerBlocked
			n = CustomerBlocked{FamilyID: p.FamilyID, CustomerID: p.CustomerID, BlockReason: p.Rule,
				BlockedAt: e.Timestamp, Decision: p.ProcessResult}
		default:
			return nil, invalid("notifies", "%q is no notification a usage-persist record stands for", k)
		}
		if err := n.Validate(); err != nil {
			return nil, fmt.Errorf("%s of %s: %w", k, e.EventID, err)
		}
		out = append(out, Envelope[Notification]{EventID: DerivedID(PrefixNotification, p.OriginEventID, purpose),
			EventType: TypeNotification, SubType: n.SubType(), Timestamp: e.Timestamp, Payload: n})
	}
	return out, nil
}

// UsedPercent is the share of total that remaining leaves used, in percent
// with two decimals (truncated), 0 when total is not positive: QUOTA_UPDATED's
// familyUsedPercent, as the quota engine computes it.
func UsedPercent(total, remaining int64) float64 {
	if total <= 0 {
		return 0
	}
	return float64((total-remaining)*10000/total) / 100
}
