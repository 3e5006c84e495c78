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

// usageOutputs are the records one judged usage event causes: usage-persist
// always, and QUOTA_UPDATED (allowed) or CUSTOMER_BLOCKED (blocked), and a
// THRESHOLD_ALERT per crossed threshold, its message alertText's; gen is
// the state generation it was judged under (the persist record names it:
// doc/architecture.md, "Late records"). Ids derive
// from the origin event id and timestamps are the event's own, so a replay
// re-emits identical records.
func usageOutputs(in envelope.Envelope[envelope.UsagePayload], res quota.Result, gen string, loc *time.Location,
	alertText func(percent int) string) ([]*kgo.Record, error) {
	pl, id, at := in.Payload, in.EventID, in.Timestamp
	recs := make([]*kgo.Record, 0, 2+len(res.Crossed))
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
	var crossed []envelope.Crossing
	for i, pct := range res.Crossed {
		arm := 1
		if i < len(res.Arms) {
			arm = res.Arms[i]
		}
		crossed = append(crossed, envelope.Crossing{Percent: pct, Arm: arm})
	}
	err := add(kafkarecord.New(envelope.TopicUsagePersist, envelope.New(
		envelope.DerivedID(envelope.PrefixPersist, id, "persist"), at,
		envelope.UsagePersistPayload{OriginEventID: id, FamilyID: pl.FamilyID, CustomerID: pl.CustomerID,
			BytesUsed: pl.BytesUsed, AppID: pl.AppID, ProcessResult: string(res.Decision),
			RemainingAfter: res.Remaining, EventTime: at, Rule: res.Rule,
			TotalBytes: res.Total, DailyUsedBytes: res.DailyUsed, MonthlyUsedBytes: res.MonthlyUsed,
			ThrottleKbps: res.ThrottleKbps, Crossed: crossed, Generation: gen})))
	if err != nil {
		return nil, err
	}

	if res.Decision == policy.Allowed {
		err = add(kafkarecord.New(envelope.TopicNotificationEvents, envelope.New(
			envelope.DerivedID(envelope.PrefixNotification, id, "quota-updated"), at,
			envelope.QuotaUpdated{FamilyID: pl.FamilyID, CustomerID: pl.CustomerID,
				FamilyRemainingBytes: res.Remaining, FamilyUsedPercent: res.UsedPercent(),
				CustomerUsedBytesToday: res.DailyUsed})))
	} else {
		err = add(kafkarecord.New(envelope.TopicNotificationEvents, envelope.New(
			envelope.DerivedID(envelope.PrefixNotification, id, "customer-blocked"), at,
			envelope.CustomerBlocked{FamilyID: pl.FamilyID, CustomerID: pl.CustomerID,
				BlockReason: res.Rule, BlockedAt: at, Decision: string(res.Decision)})))
	}
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
