package judge

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// usageOutputs are the records one judged usage event causes: one
// usage-persist record, which stands for the event's QUOTA_UPDATED
// (allowed) or CUSTOMER_BLOCKED (blocked) — the notifier derives them
// from it (envelope.PersistNotifications; doc/wire-format.md, "One record
// per decision") — and a THRESHOLD_ALERT per crossed threshold, its
// message alertText's; charged is the bytes the engine was given
// (common.event: the event's, or 0 for traffic grants charge, then
// recorded as grantChargedBytes); gen is the state generation it was
// judged under (the persist record names it: doc/architecture.md, "Late
// records"). Ids derive from the origin event id and timestamps are the
// event's own, so a replay re-emits identical records.
func usageOutputs(in envelope.Envelope[envelope.UsagePayload], charged int64, res quota.Result, gen string, loc *time.Location,
	alertText func(percent int) string) ([]*kgo.Record, error) {
	pl, id, at := in.Payload, in.EventID, in.Timestamp
	recs := make([]*kgo.Record, 0, 1+len(res.Crossed))
	add := func(r *kgo.Record, err error) error {
		if err != nil {
			return err
		}
		recs = append(recs, r)
		return nil
	}
	// The persist record carries the whole result, so Redis can be rebuilt
	// from usage_record with each event's dedupe record and each
	// threshold's arm count.
	crossed := crossings(res.Crossed, res.Arms)
	notifies := notifiesQuota
	if res.Decision != policy.Allowed {
		notifies = notifiesBlocked
	}
	err := add(kafkarecord.New(envelope.TopicUsagePersist, envelope.New(
		envelope.DerivedID(envelope.PrefixPersist, id, "persist"), at,
		envelope.UsagePersistPayload{OriginEventID: id, FamilyID: pl.FamilyID, CustomerID: pl.CustomerID,
			BytesUsed: charged, GrantChargedBytes: pl.BytesUsed - charged, AppID: pl.AppID, ProcessResult: string(res.Decision),
			RemainingAfter: res.Remaining, EventTime: at, Rule: res.Rule,
			TotalBytes: res.Total, DailyUsedBytes: res.DailyUsed, MonthlyUsedBytes: res.MonthlyUsed,
			ThrottleKbps: res.ThrottleKbps, Crossed: crossed, Generation: gen, Notifies: notifies})))
	if err != nil {
		return nil, err
	}
	for i, pct := range res.Crossed {
		// The period names the month and, when a top-up re-armed the
		// threshold and the pool fell again, the arm: "2026-02#2". The
		// notifier announces each (family, threshold, period) once.
		period := at.In(loc).Format("2006-01")
		if i < len(res.Arms) && res.Arms[i] > 1 {
			period += "#" + strconv.Itoa(res.Arms[i])
		}
		err := add(kafkarecord.New(envelope.TopicNotificationEvents, envelope.New(
			envelope.DerivedID(envelope.PrefixNotification, id, "threshold:"+strconv.Itoa(pct)), at,
			envelope.ThresholdAlert{FamilyID: pl.FamilyID, ThresholdPercent: pct,
				Message: alertText(pct), Period: period})))
		if err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// grantOutputs are the records one judged grant step causes: one
// usage-persist record (the charge and the reservation after the step:
// its member "grant", doc/wire-format.md), which stands for the step's
// QUOTA_UPDATED when it charged and its CUSTOMER_BLOCKED when it ends the
// member's session with nothing granted (a final answer), and a
// THRESHOLD_ALERT per threshold the charge crossed (in the charged month);
// gen is the state generation it was judged under, as usageOutputs'. Ids
// derive from the step's id, timestamps are the step's (the charge's time
// for the persist record's eventTime), so a retry re-emits identical
// records.
func grantOutputs(op quota.GrantOp, res quota.GrantResult, gen string, loc *time.Location,
	alertText func(percent int) string) ([]*kgo.Record, error) {
	id, at := op.ID, op.At
	recs := make([]*kgo.Record, 0, 1+len(res.Crossed))
	add := func(r *kgo.Record, err error) error {
		if err != nil {
			return err
		}
		recs = append(recs, r)
		return nil
	}
	crossed := crossings(res.Crossed, res.Arms)
	var notifies []string
	switch blocked := !op.Release && res.Granted == 0 && res.Final; {
	case res.Charged > 0 && blocked:
		notifies = notifiesBoth
	case res.Charged > 0:
		notifies = notifiesQuota
	case blocked:
		notifies = notifiesBlocked
	}
	err := add(kafkarecord.New(envelope.TopicUsagePersist, envelope.New(
		envelope.DerivedID(envelope.PrefixPersist, id, "persist"), at,
		envelope.UsagePersistPayload{OriginEventID: id, FamilyID: op.FamilyID, CustomerID: op.CustomerID,
			BytesUsed: res.Charged, AppID: op.AppID, ProcessResult: string(res.Decision),
			RemainingAfter: res.Remaining, EventTime: res.ChargedAt, Rule: res.Rule,
			TotalBytes: res.Total, DailyUsedBytes: res.DailyUsed, MonthlyUsedBytes: res.MonthlyUsed,
			ThrottleKbps: res.ThrottleKbps, Crossed: crossed,
			Grant: &envelope.GrantStep{GrantID: op.GrantID, PreviousStep: res.Previous, GrantedBytes: res.Granted,
				Open: res.Granted > 0 || !(op.Release || res.Final), Final: res.Final, OverageBytes: res.Overage,
				ReservedBytes: res.Reserved, ValidUntil: res.ValidUntil, Reclaim: res.Reclaim,
				Category: string(op.Category)},
			Generation: gen, Notifies: notifies})))
	if err != nil {
		return nil, err
	}
	for i, pct := range res.Crossed {
		period := res.ChargedAt.In(loc).Format("2006-01")
		if i < len(res.Arms) && res.Arms[i] > 1 {
			period += "#" + strconv.Itoa(res.Arms[i])
		}
		err := add(kafkarecord.New(envelope.TopicNotificationEvents, envelope.New(
			envelope.DerivedID(envelope.PrefixNotification, id, "threshold:"+strconv.Itoa(pct)), at,
			envelope.ThresholdAlert{FamilyID: op.FamilyID, ThresholdPercent: pct,
				Message: alertText(pct), Period: period})))
		if err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// The values of a persist record's member notifies (shared, never
// modified).
var (
	notifiesQuota   = []string{string(envelope.SubQuotaUpdated)}
	notifiesBlocked = []string{string(envelope.SubCustomerBlocked)}
	notifiesBoth    = []string{string(envelope.SubQuotaUpdated), string(envelope.SubCustomerBlocked)}
)

// crossings pairs the thresholds a step crossed with their arm counts (1
// when the engine named none), as the persist record carries them.
func crossings(crossed, arms []int) []envelope.Crossing {
	var out []envelope.Crossing
	for i, pct := range crossed {
		arm := 1
		if i < len(arms) {
			arm = arms[i]
		}
		out = append(out, envelope.Crossing{Percent: pct, Arm: arm})
	}
	return out
}
