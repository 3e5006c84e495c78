package envelope

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// The built-in payloads. Each is a plain value type: construct it with a
// composite literal, pass it to New, and get it back from Decode in a type
// switch. JSON member names are those of doc/wire-format.md; every member
// is read by its exact name, unknown members are ignored, null means absent.
//
// Decoding reports a required member that is missing as "required"; Validate
// (run by Encode and by every Decode) reports values out of range.

// Compile-time checks that the built-ins are payloads.
var (
	_ Payload      = UsagePayload{}
	_ Payload      = PolicyUpdatedPayload{}
	_ Payload      = UsagePersistPayload{}
	_ Notification = QuotaUpdated{}
	_ Notification = CustomerBlocked{}
	_ Notification = ThresholdAlert{}
	_ Notification = DataRequested{}
	_ Notification = DataRequestAnswered{}
	_ Notification = DataGifted{}
)

// UsagePayload is one chunk of data a member used (DATA_USAGE, topic
// usage-events). Metadata is passed through untouched; its values come back
// from Decode as encoding/json's generic types (float64, string, bool, nil,
// []any, map[string]any) and an empty map comes back as nil.
type UsagePayload struct {
	FamilyID   int64          `json:"familyId"`           // > 0; the record key
	CustomerID int64          `json:"customerId"`         // > 0
	AppID      string         `json:"appId"`              // non-empty, e.g. "com.youtube.app"
	BytesUsed  int64          `json:"bytesUsed"`          // ≥ 0; must be present on the wire
	Metadata   map[string]any `json:"metadata,omitempty"` // optional, e.g. deviceId, networkType
}

func (UsagePayload) EventType() EventType { return TypeDataUsage }
func (UsagePayload) SubType() SubType     { return "" }
func (p UsagePayload) FamilyKey() int64   { return p.FamilyID }

func (p UsagePayload) Validate() error {
	return errors.Join(
		positive("familyId", p.FamilyID),
		positive("customerId", p.CustomerID),
		nonEmpty("appId", p.AppID),
		nonNegative("bytesUsed", p.BytesUsed),
	)
}

func (p *UsagePayload) UnmarshalJSON(data []byte) error {
	return decodeInto(p, data, func(o *object) UsagePayload {
		return UsagePayload{
			FamilyID:   o.int64("familyId", true),
			CustomerID: o.int64("customerId", true),
			AppID:      o.str("appId", true),
			BytesUsed:  o.int64("bytesUsed", true),
			Metadata:   o.anyMap("metadata"),
		}
	})
}

// PolicyUpdatedPayload announces a change of one member's policy
// (POLICY_UPDATED, topic policy-updated). Constraints is the member's whole
// constraint map after the change and Version increases with every change of
// that member, so a consumer applies an update only when Version is newer than
// what it holds: replays and reordering are harmless, and a change of several
// keys is one event. PolicyKey, OldValue and NewValue describe the change for
// people (audit, notifications); PolicyKey is empty when several keys changed.
type PolicyUpdatedPayload struct {
	FamilyID         int64             `json:"familyId"`            // > 0; the record key
	TargetCustomerID int64             `json:"targetCustomerId"`    // > 0
	PolicyKey        string            `json:"policyKey,omitempty"` // e.g. "LIMIT:DATA:DAILY"; optional
	OldValue         *string           `json:"oldValue,omitempty"`  // nil: the key was not set
	NewValue         *string           `json:"newValue,omitempty"`  // nil: the key was removed
	ChangedBy        int64             `json:"changedBy"`           // ≥ 0; customer id of the owner, 0 for the system
	Version          int64             `json:"version"`             // ≥ 1, monotonic per member
	Constraints      map[string]string `json:"constraints"`         // required; empty (not nil) = no constraints
}

func (PolicyUpdatedPayload) EventType() EventType { return TypePolicyUpdated }
func (PolicyUpdatedPayload) SubType() SubType     { return "" }
func (p PolicyUpdatedPayload) FamilyKey() int64   { return p.FamilyID }

func (p PolicyUpdatedPayload) Validate() error {
	var constraints error
	if p.Constraints == nil {
		constraints = invalid("constraints", "required (an empty map removes every constraint)")
	}
	return errors.Join(
		positive("familyId", p.FamilyID),
		positive("targetCustomerId", p.TargetCustomerID),
		nonNegative("changedBy", p.ChangedBy),
		atLeast("version", p.Version, 1),
		constraints,
	)
}

func (p *PolicyUpdatedPayload) UnmarshalJSON(data []byte) error {
	return decodeInto(p, data, func(o *object) PolicyUpdatedPayload {
		return PolicyUpdatedPayload{
			FamilyID:         o.int64("familyId", true),
			TargetCustomerID: o.int64("targetCustomerId", true),
			PolicyKey:        o.str("policyKey", false),
			OldValue:         o.optStr("oldValue"),
			NewValue:         o.optStr("newValue"),
			ChangedBy:        o.int64("changedBy", false),
			Version:          o.int64("version", true),
			Constraints:      o.strMap("constraints", true),
		}
	})
}

// UsagePersistPayload is the processor's decision on one usage event
// (USAGE_PERSIST, topic usage-persist), written to the database by the
// write-behind. OriginEventID is the eventId of the usage event; the
// envelope's own id is derived from it (DerivedID) so a replay re-emits the
// same record.
//
// TotalBytes through Crossed carry the rest of the engine's result, so that
// Redis can be rebuilt from the database with each event's original result
// (its dedupe record) and each threshold's arm count. They are optional and
// omitted when zero or empty: records written before they existed decode
// with zeros, and older consumers ignore them.
type UsagePersistPayload struct {
	OriginEventID    string     `json:"originEventId"`              // non-empty
	FamilyID         int64      `json:"familyId"`                   // > 0; the record key
	CustomerID       int64      `json:"customerId"`                 // > 0
	BytesUsed        int64      `json:"bytesUsed"`                  // ≥ 0
	AppID            string     `json:"appId"`                      // as in the usage event
	ProcessResult    string     `json:"processResult"`              // non-empty, e.g. "ALLOWED", "BLOCKED"
	RemainingAfter   int64      `json:"remainingAfter"`             // ≥ 0, family bytes left after the decision
	EventTime        time.Time  `json:"eventTime"`                  // the usage event's timestamp
	Rule             string     `json:"rule,omitempty"`             // the constraint key that decided a block; optional
	TotalBytes       int64      `json:"totalBytes,omitempty"`       // ≥ 0, the month's pool (plan + top-ups) at the decision; optional
	DailyUsedBytes   int64      `json:"dailyUsedBytes,omitempty"`   // ≥ 0, the member's usage of the event's day after it; optional
	MonthlyUsedBytes int64      `json:"monthlyUsedBytes,omitempty"` // ≥ 0, the member's usage of the event's month after it; optional
	ThrottleKbps     int64      `json:"throttleKbps,omitempty"`     // ≥ 0, the member's THROTTLE:SPEED with ALLOWED; optional
	Crossed          []Crossing `json:"crossed,omitempty"`          // the thresholds this event crossed; optional, [] reads as nil
	Grant            *GrantStep `json:"grant,omitempty"`            // a grant step's record (see GrantStep); optional
	// GrantChargedBytes is what a usage event reported of traffic the
	// network charges through grants (doc/wire-format.md, "Charged once"):
	// recorded, and not in bytesUsed, which is what the event charged.
	// Optional, ≥ 0; a consumer of an earlier release ignores it.
	GrantChargedBytes int64 `json:"grantChargedBytes,omitempty"`
	// Generation is the Redis state generation the event was judged under
	// (optional; a record written after a rebuild named another generation
	// is one that rebuild did not read: doc/architecture.md, "Late records").
	Generation string `json:"generation,omitempty"`
	// Notifies names the notifications this record stands for, in the
	// order they are due (QUOTA_UPDATED, CUSTOMER_BLOCKED): the producer
	// sent no record of its own for them, and the notifier derives each
	// from this record (PersistNotifications; doc/wire-format.md, "One
	// record per decision"). Optional: a record without it (an earlier
	// release's) came with its own notification records.
	Notifies []string `json:"notifies,omitempty"`
}

// GrantStep makes a usage-persist record that of a grant step (a
// network's create, update or release of a grant, quota.GrantOp) rather
// than of a usage event: originEventId is the step's id, bytesUsed what
// the step charged (all of it counts as used, whatever processResult
// says: processResult is the answer about the next units), eventTime when
// the charge counts (quota.GrantResult.ChargedAt), and the envelope's
// timestamp the step's time. Optional (a record of a usage event has
// none); a consumer of an earlier release ignores it and reads the record
// as an event's (doc/wire-format.md, "Grant steps").
type GrantStep struct {
	GrantID string `json:"grantId"` // non-empty: the grant the step is of
	// PreviousStep is the step whose reservation this one returned (the
	// grant's steps form a chain; the truth's latest reservation of a
	// grant is the one no step replaced); "" when it held none.
	PreviousStep  string    `json:"previousStep,omitempty"`
	GrantedBytes  int64     `json:"grantedBytes"`            // ≥ 0, reserved for the grant now
	Open          bool      `json:"open"`                    // the grant is open after the step (a release, a final answer close it)
	Final         bool      `json:"final,omitempty"`         // these are the member's last units
	OverageBytes  int64     `json:"overageBytes,omitempty"`  // ≥ 0, charged beyond what the grant had reserved
	ReservedBytes int64     `json:"reservedBytes,omitempty"` // ≥ 0, what the family's grants reserve of the step's month after it
	ValidUntil    time.Time `json:"validUntil,omitzero"`     // when the answer may change; absent on a release
	Reclaim       []string  `json:"reclaim,omitempty"`       // grants holding more than their fair share; [] reads as nil
	// Category is the app category the step was judged as (GrantOp's, or
	// its app's): its charge counts for that category's daily budget on the
	// step's day. Absent in records of releases before it.
	Category string `json:"category,omitempty"`
}

func (g *GrantStep) validate(field string) error {
	errs := []error{
		nonEmpty(field+".grantId", g.GrantID),
		nonNegative(field+".grantedBytes", g.GrantedBytes),
		nonNegative(field+".overageBytes", g.OverageBytes),
		nonNegative(field+".reservedBytes", g.ReservedBytes),
	}
	if !g.ValidUntil.IsZero() {
		errs = append(errs, validTime(field+".validUntil", g.ValidUntil))
	}
	for i, id := range g.Reclaim {
		errs = append(errs, nonEmpty(fmt.Sprintf("%s.reclaim[%d]", field, i), id))
	}
	if !categoryName(g.Category) {
		errs = append(errs, invalid(field+".category", "must be an app category: 1 to %d upper-case letters, digits or _", MaxCategoryLen))
	}
	return errors.Join(errs...)
}

// MarshalJSON writes g as the fast encoder does (members in declaration
// order, optional ones when set).
func (g GrantStep) MarshalJSON() ([]byte, error) { return g.appendJSON(nil), nil }

// Crossing is one threshold a usage event crossed: Percent is the threshold
// (percent of the pool remaining) and Arm how many times it has fired this
// month, this time included — 1 the first time, 2 after a top-up re-armed it
// and the pool fell below it again.
type Crossing struct {
	Percent int `json:"percent"` // 1–100
	Arm     int `json:"arm"`     // ≥ 1
}

func (UsagePersistPayload) EventType() EventType { return TypeUsagePersist }
func (UsagePersistPayload) SubType() SubType     { return "" }
func (p UsagePersistPayload) FamilyKey() int64   { return p.FamilyID }

func (p UsagePersistPayload) Validate() error {
	return errors.Join(
		nonEmpty("originEventId", p.OriginEventID),
		positive("familyId", p.FamilyID),
		positive("customerId", p.CustomerID),
		nonNegative("bytesUsed", p.BytesUsed),
		nonEmpty("processResult", p.ProcessResult),
		nonNegative("remainingAfter", p.RemainingAfter),
		validTime("eventTime", p.EventTime),
		nonNegative("totalBytes", p.TotalBytes),
		nonNegative("dailyUsedBytes", p.DailyUsedBytes),
		nonNegative("monthlyUsedBytes", p.MonthlyUsedBytes),
		nonNegative("throttleKbps", p.ThrottleKbps),
		nonNegative("grantChargedBytes", p.GrantChargedBytes),
		validCrossed("crossed", p.Crossed),
		p.validGrant(),
		validNotifies("notifies", p.Notifies),
	)
}

// validNotifies reports a notification a usage-persist record cannot stand
// for, and one named twice.
func validNotifies(field string, kinds []string) error {
	var errs []error
	for i, k := range kinds {
		switch SubType(k) {
		case SubQuotaUpdated, SubCustomerBlocked:
		default:
			errs = append(errs, invalid(fmt.Sprintf("%s[%d]", field, i), "must be QUOTA_UPDATED or CUSTOMER_BLOCKED"))
		}
		for _, earlier := range kinds[:i] {
			if earlier == k {
				errs = append(errs, invalid(fmt.Sprintf("%s[%d]", field, i), "names %s twice", k))
			}
		}
	}
	return errors.Join(errs...)
}

func (p UsagePersistPayload) validGrant() error {
	if p.Grant == nil {
		return nil
	}
	return p.Grant.validate("grant")
}

// validCrossed reports thresholds out of 1–100 and arms below 1.
func validCrossed(field string, cs []Crossing) error {
	var errs []error
	for i, c := range cs {
		if c.Percent < 1 || c.Percent > 100 {
			errs = append(errs, invalid(fmt.Sprintf("%s[%d].percent", field, i), "must be between 1 and 100"))
		}
		if c.Arm < 1 {
			errs = append(errs, invalid(fmt.Sprintf("%s[%d].arm", field, i), "must be ≥ 1"))
		}
	}
	return errors.Join(errs...)
}

func (p UsagePersistPayload) MarshalJSON() ([]byte, error) {
	type plain UsagePersistPayload
	return marshal(struct {
		plain
		EventTime string `json:"eventTime"`
	}{plain(p), formatTime(p.EventTime)})
}

func (p *UsagePersistPayload) UnmarshalJSON(data []byte) error {
	return decodeInto(p, data, func(o *object) UsagePersistPayload {
		return UsagePersistPayload{
			OriginEventID:     o.str("originEventId", true),
			FamilyID:          o.int64("familyId", true),
			CustomerID:        o.int64("customerId", true),
			BytesUsed:         o.int64("bytesUsed", true),
			AppID:             o.str("appId", false),
			ProcessResult:     o.str("processResult", true),
			RemainingAfter:    o.int64("remainingAfter", true),
			EventTime:         o.time("eventTime", true),
			Rule:              o.str("rule", false),
			TotalBytes:        o.int64("totalBytes", false),
			DailyUsedBytes:    o.int64("dailyUsedBytes", false),
			MonthlyUsedBytes:  o.int64("monthlyUsedBytes", false),
			ThrottleKbps:      o.int64("throttleKbps", false),
			Crossed:           o.crossings("crossed"),
			Grant:             o.grantStep("grant"),
			Generation:        o.str("generation", false),
			Notifies:          o.strings("notifies"),
			GrantChargedBytes: o.int64("grantChargedBytes", false),
		}
	})
}

// Notification is implemented by the NOTIFICATION payloads (topic
// notification-events) and by nothing else, so a type switch over it is
// exhaustive: DecodeAs[Notification] accepts exactly those events.
type Notification interface {
	Payload
	notification()
}

// QuotaUpdated reports the family pool after an allowed usage event
// (NOTIFICATION / QUOTA_UPDATED).
type QuotaUpdated struct {
	FamilyID               int64   `json:"familyId"`               // > 0; the record key
	CustomerID             int64   `json:"customerId"`             // > 0
	FamilyRemainingBytes   int64   `json:"familyRemainingBytes"`   // ≥ 0
	FamilyUsedPercent      float64 `json:"familyUsedPercent"`      // 0–100
	CustomerUsedBytesToday int64   `json:"customerUsedBytesToday"` // ≥ 0
}

func (QuotaUpdated) EventType() EventType { return TypeNotification }
func (QuotaUpdated) SubType() SubType     { return SubQuotaUpdated }
func (p QuotaUpdated) FamilyKey() int64   { return p.FamilyID }
func (QuotaUpdated) notification()        {}

func (p QuotaUpdated) Validate() error {
	var pct error
	if !(p.FamilyUsedPercent >= 0 && p.FamilyUsedPercent <= 100) { // also rejects NaN
		pct = invalid("familyUsedPercent", "must be between 0 and 100")
	}
	return errors.Join(
		positive("familyId", p.FamilyID),
		positive("customerId", p.CustomerID),
		nonNegative("familyRemainingBytes", p.FamilyRemainingBytes),
		pct,
		nonNegative("customerUsedBytesToday", p.CustomerUsedBytesToday),
	)
}

func (p *QuotaUpdated) UnmarshalJSON(data []byte) error {
	return decodeInto(p, data, func(o *object) QuotaUpdated {
		return QuotaUpdated{
			FamilyID:               o.int64("familyId", true),
			CustomerID:             o.int64("customerId", true),
			FamilyRemainingBytes:   o.int64("familyRemainingBytes", true),
			FamilyUsedPercent:      o.float64("familyUsedPercent", true),
			CustomerUsedBytesToday: o.int64("customerUsedBytesToday", true),
		}
	})
}

// CustomerBlocked reports that a member was blocked (NOTIFICATION /
// CUSTOMER_BLOCKED). BlockReason is the constraint key that blocked, e.g.
// "LIMIT:DATA:DAILY".
type CustomerBlocked struct {
	FamilyID    int64     `json:"familyId"`           // > 0; the record key
	CustomerID  int64     `json:"customerId"`         // > 0
	BlockReason string    `json:"blockReason"`        // non-empty
	BlockedAt   time.Time `json:"blockedAt"`          // required
	Decision    string    `json:"decision,omitempty"` // the engine's decision code; optional
}

func (CustomerBlocked) EventType() EventType { return TypeNotification }
func (CustomerBlocked) SubType() SubType     { return SubCustomerBlocked }
func (p CustomerBlocked) FamilyKey() int64   { return p.FamilyID }
func (CustomerBlocked) notification()        {}

func (p CustomerBlocked) Validate() error {
	return errors.Join(
		positive("familyId", p.FamilyID),
		positive("customerId", p.CustomerID),
		nonEmpty("blockReason", p.BlockReason),
		validTime("blockedAt", p.BlockedAt),
	)
}

func (p CustomerBlocked) MarshalJSON() ([]byte, error) {
	type plain CustomerBlocked
	return marshal(struct {
		plain
		BlockedAt string `json:"blockedAt"`
	}{plain(p), formatTime(p.BlockedAt)})
}

func (p *CustomerBlocked) UnmarshalJSON(data []byte) error {
	return decodeInto(p, data, func(o *object) CustomerBlocked {
		return CustomerBlocked{
			FamilyID:    o.int64("familyId", true),
			CustomerID:  o.int64("customerId", true),
			BlockReason: o.str("blockReason", true),
			BlockedAt:   o.time("blockedAt", true),
			Decision:    o.str("decision", false),
		}
	})
}

// ThresholdAlert tells a family that its pool fell below ThresholdPercent
// remaining (NOTIFICATION / THRESHOLD_ALERT). Period names the billing period
// (e.g. "2026-02") so an alert is sent once per threshold and period.
type ThresholdAlert struct {
	FamilyID         int64  `json:"familyId"`         // > 0; the record key
	ThresholdPercent int    `json:"thresholdPercent"` // 1–99, e.g. 50, 30, 10
	Message          string `json:"message"`          // non-empty, shown to people
	Period           string `json:"period,omitempty"` // optional
}

func (ThresholdAlert) EventType() EventType { return TypeNotification }
func (ThresholdAlert) SubType() SubType     { return SubThresholdAlert }
func (p ThresholdAlert) FamilyKey() int64   { return p.FamilyID }
func (ThresholdAlert) notification()        {}

func (p ThresholdAlert) Validate() error {
	var pct error
	if p.ThresholdPercent < 1 || p.ThresholdPercent > 99 {
		pct = invalid("thresholdPercent", "must be between 1 and 99")
	}
	return errors.Join(
		positive("familyId", p.FamilyID),
		pct,
		nonEmpty("message", p.Message),
	)
}

func (p *ThresholdAlert) UnmarshalJSON(data []byte) error {
	return decodeInto(p, data, func(o *object) ThresholdAlert {
		return ThresholdAlert{
			FamilyID:         o.int64("familyId", true),
			ThresholdPercent: o.int("thresholdPercent", true),
			Message:          o.str("message", true),
			Period:           o.str("period", false),
		}
	})
}

// DataRequested tells a family's owners that a member asked for extra data
// (NOTIFICATION / DATA_REQUESTED, "ask for more"). Only owners (and the back
// office) are its audience.
//
// Kind says what is asked for: more data (DATA, the default: absent), more
// time in a downtime (TIME, "30분 더") or more time on a blocked app (APP,
// AppID the app); Minutes is how long for TIME and APP.
type DataRequested struct {
	FamilyID    int64     `json:"familyId"`          // > 0; the record key
	RequestID   int64     `json:"requestId"`         // > 0: the data request
	CustomerID  int64     `json:"customerId"`        // > 0: the member who asks
	AmountBytes int64     `json:"amountBytes"`       // > 0: what it asks for (DATA); 0 for TIME and APP
	Message     string    `json:"message,omitempty"` // optional, the member's words
	RequestedAt time.Time `json:"requestedAt"`       // required
	Kind        string    `json:"kind,omitempty"`    // DATA (or absent), TIME or APP
	AppID       string    `json:"appId,omitempty"`   // APP: the app
	Minutes     int64     `json:"minutes,omitempty"` // TIME and APP: > 0, how long
}

// The kinds of a request ("ask for more").
const (
	KindData = "DATA" // more data
	KindTime = "TIME" // more time in a downtime (an EXCEPT:TIME)
	KindApp  = "APP"  // more time on a blocked app (an EXCEPT:APP:<app>)
)

func (DataRequested) EventType() EventType { return TypeNotification }
func (DataRequested) SubType() SubType     { return SubDataRequested }
func (p DataRequested) FamilyKey() int64   { return p.FamilyID }
func (DataRequested) notification()        {}

func (p DataRequested) Validate() error {
	var kind error
	switch p.Kind {
	case "", KindData:
		kind = positive("amountBytes", p.AmountBytes)
	case KindTime, KindApp:
		kind = positive("minutes", p.Minutes)
		if p.Kind == KindApp && p.AppID == "" {
			kind = errors.Join(kind, invalid("appId", "required for an APP request"))
		}
	default:
		kind = invalid("kind", "must be DATA, TIME or APP")
	}
	return errors.Join(
		positive("familyId", p.FamilyID),
		positive("requestId", p.RequestID),
		positive("customerId", p.CustomerID),
		kind,
		validTime("requestedAt", p.RequestedAt),
	)
}

func (p DataRequested) MarshalJSON() ([]byte, error) {
	type plain DataRequested
	return marshal(struct {
		plain
		RequestedAt string `json:"requestedAt"`
	}{plain(p), formatTime(p.RequestedAt)})
}

func (p *DataRequested) UnmarshalJSON(data []byte) error {
	return decodeInto(p, data, func(o *object) DataRequested {
		return DataRequested{
			FamilyID:    o.int64("familyId", true),
			RequestID:   o.int64("requestId", true),
			CustomerID:  o.int64("customerId", true),
			AmountBytes: o.int64("amountBytes", true),
			Message:     o.str("message", false),
			RequestedAt: o.time("requestedAt", true),
			Kind:        o.str("kind", false),
			AppID:       o.str("appId", false),
			Minutes:     o.int64("minutes", false),
		}
	})
}

// The answers a DataRequestAnswered carries, and the grants of an approval.
const (
	AnswerApproved = "APPROVED"
	AnswerDeclined = "DECLINED"
	GrantDay       = "DAY"   // the member's limits raised for the rest of the day
	GrantMonth     = "MONTH" // the member's limits raised for the rest of the month
	GrantTopUp     = "TOPUP" // the family's pool topped up
	GrantTime      = "TIME"  // downtime lifted for a while (a TIME request)
	GrantApp       = "APP"   // an app's block lifted for a while (an APP request)
)

// DataRequestAnswered tells the member who asked for extra data how an owner
// answered (NOTIFICATION / DATA_REQUEST_ANSWERED): APPROVED with a grant and
// the bytes granted, or DECLINED with an optional reason. A TIME or APP
// request (Kind) is answered in minutes: granted (or asked for), and Until,
// the local time YYYYMMDDHHMM the exception ends at.
type DataRequestAnswered struct {
	FamilyID    int64     `json:"familyId"`          // > 0; the record key
	RequestID   int64     `json:"requestId"`         // > 0
	CustomerID  int64     `json:"customerId"`        // > 0: the member who asked
	Status      string    `json:"status"`            // APPROVED or DECLINED
	Grant       string    `json:"grant,omitempty"`   // DAY, MONTH, TOPUP, TIME or APP; required when APPROVED, absent when DECLINED
	AmountBytes int64     `json:"amountBytes"`       // > 0: granted (APPROVED) or asked for (DECLINED), DATA; 0 for TIME and APP
	Reason      string    `json:"reason,omitempty"`  // optional, the owner's words
	AnsweredBy  int64     `json:"answeredBy"`        // ≥ 0: the owner (0: the back office)
	AnsweredAt  time.Time `json:"answeredAt"`        // required
	Kind        string    `json:"kind,omitempty"`    // DATA (or absent), TIME or APP
	AppID       string    `json:"appId,omitempty"`   // APP: the app
	Minutes     int64     `json:"minutes,omitempty"` // TIME and APP: > 0, granted (APPROVED) or asked for (DECLINED)
	Until       string    `json:"until,omitempty"`   // TIME and APP approved: the local time YYYYMMDDHHMM it ends at
}

func (DataRequestAnswered) EventType() EventType { return TypeNotification }
func (DataRequestAnswered) SubType() SubType     { return SubDataRequestAnswered }
func (p DataRequestAnswered) FamilyKey() int64   { return p.FamilyID }
func (DataRequestAnswered) notification()        {}

func (p DataRequestAnswered) Validate() error {
	var status, grant, amount error
	timed := p.Kind == KindTime || p.Kind == KindApp
	switch p.Status {
	case AnswerApproved:
		switch {
		case timed && p.Grant != p.Kind:
			grant = invalid("grant", "must be %s when a %s request is approved", p.Kind, p.Kind)
		case timed && len(p.Until) != 12:
			grant = invalid("until", "must be the local time YYYYMMDDHHMM the exception ends at")
		case !timed && p.Grant != GrantDay && p.Grant != GrantMonth && p.Grant != GrantTopUp:
			grant = invalid("grant", "must be DAY, MONTH or TOPUP when approved")
		}
	case AnswerDeclined:
		if p.Grant != "" {
			grant = invalid("grant", "must be absent when declined")
		}
	default:
		status = invalid("status", "must be APPROVED or DECLINED")
	}
	switch p.Kind {
	case "", KindData:
		amount = positive("amountBytes", p.AmountBytes)
	case KindTime, KindApp:
		amount = positive("minutes", p.Minutes)
	default:
		amount = invalid("kind", "must be DATA, TIME or APP")
	}
	return errors.Join(
		positive("familyId", p.FamilyID),
		positive("requestId", p.RequestID),
		positive("customerId", p.CustomerID),
		status, grant, amount,
		nonNegative("answeredBy", p.AnsweredBy),
		validTime("answeredAt", p.AnsweredAt),
	)
}

func (p DataRequestAnswered) MarshalJSON() ([]byte, error) {
	type plain DataRequestAnswered
	return marshal(struct {
		plain
		AnsweredAt string `json:"answeredAt"`
	}{plain(p), formatTime(p.AnsweredAt)})
}

func (p *DataRequestAnswered) UnmarshalJSON(data []byte) error {
	return decodeInto(p, data, func(o *object) DataRequestAnswered {
		return DataRequestAnswered{
			FamilyID:    o.int64("familyId", true),
			RequestID:   o.int64("requestId", true),
			CustomerID:  o.int64("customerId", true),
			Status:      o.str("status", true),
			Grant:       o.str("grant", false),
			AmountBytes: o.int64("amountBytes", true),
			Reason:      o.str("reason", false),
			AnsweredBy:  o.int64("answeredBy", true),
			AnsweredAt:  o.time("answeredAt", true),
			Kind:        o.str("kind", false),
			AppID:       o.str("appId", false),
			Minutes:     o.int64("minutes", false),
			Until:       o.str("until", false),
		}
	})
}

// DataGifted tells one member of a gift of data between two members of
// its family (NOTIFICATION / DATA_GIFTED, "데이터 선물하기"): the receiver
// that it received it, the giver that it was given. A gift is two events,
// one for each: CustomerID is the member told, FromCustomerID or
// ToCustomerID. GivenBy is who made the gift — the giver itself, or an
// owner giving a member's data for it; 0: the back office. The names are
// the members' names when the gift was made, so the texts name people
// without a lookup.
type DataGifted struct {
	FamilyID       int64     `json:"familyId"`           // > 0; the record key
	GiftID         int64     `json:"giftId"`             // > 0: the gifts row
	CustomerID     int64     `json:"customerId"`         // > 0: the member told, fromCustomerId or toCustomerId
	FromCustomerID int64     `json:"fromCustomerId"`     // > 0: the giver
	ToCustomerID   int64     `json:"toCustomerId"`       // > 0, not fromCustomerId: the receiver
	AmountBytes    int64     `json:"amountBytes"`        // > 0: the bytes given
	Month          string    `json:"month"`              // YYYYMM: the month the gift is for
	GivenBy        int64     `json:"givenBy"`            // ≥ 0: the member who made the gift (0: the back office)
	FromName       string    `json:"fromName,omitempty"` // optional: the giver's name
	ToName         string    `json:"toName,omitempty"`   // optional: the receiver's name
	ByName         string    `json:"byName,omitempty"`   // optional: the name of GivenBy when it is neither member
	GivenAt        time.Time `json:"givenAt"`            // required
}

// MaxNameLen is the most characters of a member's name an event carries:
// the names the store keeps (so a text naming one fits the inbox's title).
const MaxNameLen = 100

func (DataGifted) EventType() EventType { return TypeNotification }
func (DataGifted) SubType() SubType     { return SubDataGifted }
func (p DataGifted) FamilyKey() int64   { return p.FamilyID }
func (DataGifted) notification()        {}

// Received reports whether p tells the receiver (else the giver).
func (p DataGifted) Received() bool { return p.CustomerID == p.ToCustomerID }

func (p DataGifted) Validate() error {
	var members, month error
	switch {
	case p.FromCustomerID > 0 && p.FromCustomerID == p.ToCustomerID:
		members = invalid("toCustomerId", "must not be fromCustomerId")
	case p.CustomerID > 0 && p.CustomerID != p.FromCustomerID && p.CustomerID != p.ToCustomerID:
		members = invalid("customerId", "must be fromCustomerId or toCustomerId")
	}
	if !isMonth(p.Month) {
		month = invalid("month", "must be YYYYMM")
	}
	return errors.Join(
		memberName("fromName", p.FromName), memberName("toName", p.ToName), memberName("byName", p.ByName),
		positive("familyId", p.FamilyID),
		positive("giftId", p.GiftID),
		positive("customerId", p.CustomerID),
		positive("fromCustomerId", p.FromCustomerID),
		positive("toCustomerId", p.ToCustomerID),
		members,
		positive("amountBytes", p.AmountBytes),
		month,
		nonNegative("givenBy", p.GivenBy),
		validTime("givenAt", p.GivenAt),
	)
}

// memberName reports a member's name longer than MaxNameLen characters.
func memberName(field, v string) error {
	if utf8.RuneCountInString(v) > MaxNameLen {
		return invalid(field, "at most %d characters", MaxNameLen)
	}
	return nil
}

// isMonth reports whether s is a month YYYYMM (01–12).
func isMonth(s string) bool {
	if len(s) != 6 {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	m := (s[4]-'0')*10 + s[5] - '0'
	return m >= 1 && m <= 12
}

func (p DataGifted) MarshalJSON() ([]byte, error) {
	type plain DataGifted
	return marshal(struct {
		plain
		GivenAt string `json:"givenAt"`
	}{plain(p), formatTime(p.GivenAt)})
}

func (p *DataGifted) UnmarshalJSON(data []byte) error {
	return decodeInto(p, data, func(o *object) DataGifted {
		return DataGifted{
			FamilyID:       o.int64("familyId", true),
			GiftID:         o.int64("giftId", true),
			CustomerID:     o.int64("customerId", true),
			FromCustomerID: o.int64("fromCustomerId", true),
			ToCustomerID:   o.int64("toCustomerId", true),
			AmountBytes:    o.int64("amountBytes", true),
			Month:          o.str("month", true),
			GivenBy:        o.int64("givenBy", true),
			FromName:       o.str("fromName", false),
			ToName:         o.str("toName", false),
			ByName:         o.str("byName", false),
			GivenAt:        o.time("givenAt", true),
		}
	})
}

// decodeInto is the UnmarshalJSON of every built-in payload: read the object
// with read, and store the result only when nothing was wrong.
func decodeInto[P any](dst *P, data []byte, read func(*object) P) error {
	if dst == nil {
		return errors.New("envelope: UnmarshalJSON on nil pointer")
	}
	o, err := parseNested("", data)
	if err != nil {
		return err
	}
	v := read(o)
	if err := o.err(); err != nil {
		return err
	}
	*dst = v
	return nil
}
