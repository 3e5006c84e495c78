package envelope_test

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/dabom/dpcs/envelope"
)

// Generators for payloads that are mostly valid: each numeric field is out of
// range one time in 25, so the property also checks that Encode rejects
// exactly what Validate rejects.

func sometimes(t *rapid.T, valid, invalid *rapid.Generator[int64], label string) int64 {
	if rapid.IntRange(0, 24).Draw(t, label+"-bad") == 0 {
		return invalid.Draw(t, label)
	}
	return valid.Draw(t, label)
}

func genID(t *rapid.T, label string) int64 {
	return sometimes(t, rapid.Int64Range(1, math.MaxInt64), rapid.Int64Range(math.MinInt64, 0), label)
}

func genCount(t *rapid.T, label string) int64 {
	return sometimes(t, rapid.OneOf(rapid.Int64Range(0, 1<<40), rapid.Int64Range(0, math.MaxInt64)), rapid.Int64Range(math.MinInt64, -1), label)
}

// genText is any Unicode text, including control characters, quotes and
// HTML metacharacters; min 1 makes it a required string.
func genText(min int) *rapid.Generator[string] { return rapid.StringN(min, 20, -1) }

// genTime is any instant RFC 3339 can write (years 0000–9999 UTC) with
// nanosecond precision, in a random zone; rarely the zero time.
var genTime = rapid.Custom(func(t *rapid.T) time.Time {
	if rapid.IntRange(0, 49).Draw(t, "zero") == 0 {
		return time.Time{}
	}
	lo := time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	hi := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
	sec := rapid.OneOf(rapid.Int64Range(lo, hi), rapid.Int64Range(1.7e9, 1.8e9)).Draw(t, "sec")
	nsec := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, 999_999_999)).Draw(t, "nsec")
	zone := time.FixedZone("", rapid.IntRange(-14*60, 14*60).Draw(t, "offsetMin")*60)
	return time.Unix(sec, nsec).In(zone)
})

// genJSON returns a generator of the values encoding/json decodes into any.
func genJSON(depth int) *rapid.Generator[any] {
	scalars := []*rapid.Generator[any]{
		rapid.Just[any](nil),
		rapid.Map(rapid.Bool(), func(b bool) any { return b }),
		rapid.Map(rapid.Float64Range(-math.MaxFloat64, math.MaxFloat64), func(f float64) any { return f }),
		rapid.Map(rapid.Int64Range(-1<<53, 1<<53), func(i int64) any { return float64(i) }),
		rapid.Map(genText(0), func(s string) any { return s }),
	}
	if depth == 0 {
		return rapid.OneOf(scalars...)
	}
	return rapid.OneOf(append(scalars,
		rapid.Custom(func(t *rapid.T) any {
			n := rapid.IntRange(0, 3).Draw(t, "len")
			s := make([]any, n)
			for i := range s {
				s[i] = genJSON(depth-1).Draw(t, "elem")
			}
			return s
		}),
		rapid.Custom(func(t *rapid.T) any { return genObject(t, depth-1, 0) }),
	)...)
}

func genObject(t *rapid.T, depth, min int) map[string]any {
	n := rapid.IntRange(min, 4).Draw(t, "members")
	m := make(map[string]any, n)
	for range n {
		m[genText(0).Draw(t, "key")] = genJSON(depth).Draw(t, "value")
	}
	return m
}

var genUsage = rapid.Custom(func(t *rapid.T) envelope.Payload {
	p := envelope.UsagePayload{
		FamilyID:   genID(t, "familyId"),
		CustomerID: genID(t, "customerId"),
		AppID:      genText(1).Draw(t, "appId"),
		BytesUsed:  genCount(t, "bytesUsed"),
	}
	if rapid.Bool().Draw(t, "hasMetadata") {
		p.Metadata = genObject(t, 2, 1)
	}
	return p
})

var genPolicy = rapid.Custom(func(t *rapid.T) envelope.Payload {
	p := envelope.PolicyUpdatedPayload{
		FamilyID:         genID(t, "familyId"),
		TargetCustomerID: genID(t, "targetCustomerId"),
		PolicyKey:        genText(0).Draw(t, "policyKey"),
		OldValue:         rapid.Ptr(genText(0), true).Draw(t, "oldValue"),
		NewValue:         rapid.Ptr(genText(0), true).Draw(t, "newValue"),
		ChangedBy:        genCount(t, "changedBy"),
		Version:          genID(t, "version"),
		Constraints:      map[string]string{},
	}
	for range rapid.IntRange(0, 5).Draw(t, "constraints") {
		p.Constraints[genText(1).Draw(t, "key")] = genText(0).Draw(t, "value")
	}
	if rapid.IntRange(0, 24).Draw(t, "nilConstraints") == 0 {
		p.Constraints = nil
	}
	return p
})

var genPersist = rapid.Custom(func(t *rapid.T) envelope.Payload {
	p := envelope.UsagePersistPayload{
		OriginEventID:  genText(1).Draw(t, "originEventId"),
		FamilyID:       genID(t, "familyId"),
		CustomerID:     genID(t, "customerId"),
		BytesUsed:      genCount(t, "bytesUsed"),
		AppID:          genText(0).Draw(t, "appId"),
		ProcessResult:  rapid.SampledFrom([]string{"ALLOWED", "BLOCKED", "DUPLICATE", ""}).Draw(t, "processResult"),
		RemainingAfter: genCount(t, "remainingAfter"),
		EventTime:      genTime.Draw(t, "eventTime"),
		Rule:           genText(0).Draw(t, "rule"),
	}
	// The engine's result: absent (a record of an older processor), or
	// present with zeros, large numbers and crossings (rarely invalid).
	if rapid.Bool().Draw(t, "hasResult") {
		optional := func(label string) int64 {
			if rapid.Bool().Draw(t, label+"-zero") {
				return 0
			}
			return genCount(t, label)
		}
		p.TotalBytes = optional("totalBytes")
		p.DailyUsedBytes = optional("dailyUsedBytes")
		p.MonthlyUsedBytes = optional("monthlyUsedBytes")
		p.ThrottleKbps = optional("throttleKbps")
		p.GrantChargedBytes = optional("grantChargedBytes")
		if rapid.Bool().Draw(t, "hasGeneration") {
			p.Generation = genText(0).Draw(t, "generation")
		}
		switch n := rapid.IntRange(-1, 4).Draw(t, "crossed"); n {
		case -1:
			p.Crossed = []envelope.Crossing{} // written as absent, read back as nil
		default:
			for range n {
				p.Crossed = append(p.Crossed, envelope.Crossing{
					Percent: rapid.OneOf(rapid.IntRange(1, 100), rapid.IntRange(-2, 102)).Draw(t, "percent"),
					Arm:     int(sometimes(t, rapid.Int64Range(1, 1<<31), rapid.Int64Range(-3, 0), "arm")),
				})
			}
		}
	}
	// A grant step's record (rarely invalid).
	if rapid.IntRange(0, 2).Draw(t, "grant") == 0 {
		g := &envelope.GrantStep{
			GrantID:       genText(0).Draw(t, "grantId"),
			PreviousStep:  genText(0).Draw(t, "previousStep"),
			GrantedBytes:  genCount(t, "grantedBytes"),
			Open:          rapid.Bool().Draw(t, "open"),
			Final:         rapid.Bool().Draw(t, "final"),
			OverageBytes:  genCount(t, "overageBytes"),
			ReservedBytes: genCount(t, "reservedBytes"),
		}
		if rapid.Bool().Draw(t, "validUntil") {
			g.ValidUntil = genTime.Draw(t, "validUntilTime")
		}
		for range rapid.IntRange(-1, 3).Draw(t, "reclaim") {
			g.Reclaim = append(g.Reclaim, genText(0).Draw(t, "reclaimed"))
		}
		p.Grant = g
	}
	return p
})

var genQuota = rapid.Custom(func(t *rapid.T) envelope.Payload {
	return envelope.QuotaUpdated{
		FamilyID:               genID(t, "familyId"),
		CustomerID:             genID(t, "customerId"),
		FamilyRemainingBytes:   genCount(t, "familyRemainingBytes"),
		FamilyUsedPercent:      rapid.OneOf(rapid.Float64Range(0, 100), rapid.Float64Range(-1, 101), rapid.SampledFrom([]float64{0, 100, 50.5})).Draw(t, "familyUsedPercent"),
		CustomerUsedBytesToday: genCount(t, "customerUsedBytesToday"),
	}
})

var genBlocked = rapid.Custom(func(t *rapid.T) envelope.Payload {
	return envelope.CustomerBlocked{
		FamilyID:    genID(t, "familyId"),
		CustomerID:  genID(t, "customerId"),
		BlockReason: genText(1).Draw(t, "blockReason"),
		BlockedAt:   genTime.Draw(t, "blockedAt"),
		Decision:    genText(0).Draw(t, "decision"),
	}
})

var genThreshold = rapid.Custom(func(t *rapid.T) envelope.Payload {
	return envelope.ThresholdAlert{
		FamilyID:         genID(t, "familyId"),
		ThresholdPercent: rapid.OneOf(rapid.IntRange(1, 99), rapid.IntRange(-5, 105)).Draw(t, "thresholdPercent"),
		Message:          genText(1).Draw(t, "message"),
		Period:           genText(0).Draw(t, "period"),
	}
})

var genGifted = rapid.Custom(func(t *rapid.T) envelope.Payload {
	p := envelope.DataGifted{
		FamilyID:       genID(t, "familyId"),
		GiftID:         genID(t, "giftId"),
		FromCustomerID: genID(t, "fromCustomerId"),
		ToCustomerID:   genID(t, "toCustomerId"),
		AmountBytes:    genID(t, "amountBytes"),
		Month:          rapid.SampledFrom([]string{"202602", "202612", "202600", "2026-02", ""}).Draw(t, "month"),
		GivenBy:        genCount(t, "givenBy"),
		FromName:       genText(0).Draw(t, "fromName"),
		ToName:         genText(0).Draw(t, "toName"),
		ByName:         genText(0).Draw(t, "byName"),
		GivenAt:        genTime.Draw(t, "givenAt"),
	}
	// The member told: the receiver, the giver, or (rarely) neither.
	p.CustomerID = rapid.SampledFrom([]int64{p.ToCustomerID, p.FromCustomerID, p.FromCustomerID + 1}).Draw(t, "customerId")
	return p
})

var genPayload = rapid.OneOf(genUsage, genPolicy, genPersist, genQuota, genBlocked, genThreshold, genGifted)

var genEvent = rapid.Custom(func(t *rapid.T) envelope.Event {
	return envelope.New(genText(1).Draw(t, "eventId"), genTime.Draw(t, "timestamp"), genPayload.Draw(t, "payload"))
})

// normalize is what a value looks like after a trip through JSON: times in
// UTC without a monotonic reading.
func normalize(e envelope.Event) envelope.Event {
	e.Timestamp = e.Timestamp.UTC()
	switch p := e.Payload.(type) {
	case envelope.UsagePersistPayload:
		p.EventTime = p.EventTime.UTC()
		if len(p.Crossed) == 0 {
			p.Crossed = nil
		}
		if p.Grant != nil {
			g := *p.Grant
			if !g.ValidUntil.IsZero() {
				g.ValidUntil = g.ValidUntil.UTC()
			}
			if len(g.Reclaim) == 0 {
				g.Reclaim = nil
			}
			p.Grant = &g
		}
		e.Payload = p
	case envelope.CustomerBlocked:
		p.BlockedAt = p.BlockedAt.UTC()
		e.Payload = p
	case envelope.DataGifted:
		p.GivenAt = p.GivenAt.UTC()
		e.Payload = p
	}
	return e
}

// exact compares times by instant and location (cmp would use Time.Equal).
var exact = cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) && a.Location() == b.Location() })

func TestRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genEvent.Draw(t, "event")
		valid := in.Validate() == nil
		b, err := envelope.Encode(in)
		if valid != (err == nil) {
			t.Fatalf("Validate valid=%v but Encode error %v", valid, err)
		}
		if !valid {
			return
		}
		out, err := envelope.Decode(b)
		if err != nil {
			t.Fatalf("Decode(Encode(x)): %v\n%s", err, b)
		}
		if diff := cmp.Diff(normalize(in), out, exact); diff != "" {
			t.Fatalf("Decode(Encode(x)) != x (-in +out):\n%s\n%s", diff, b)
		}
		again, err := envelope.Encode(out)
		if err != nil || string(again) != string(b) {
			t.Fatalf("encoding not canonical:\n%s\n%s (%v)", b, again, err)
		}
	})
}

func TestTypedRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p, ok := genUsage.Draw(t, "usage").(envelope.UsagePayload)
		if !ok || p.Validate() != nil {
			t.Skip("invalid")
		}
		in := envelope.New(envelope.NewID(envelope.PrefixEvent), genTime.Filter(func(tm time.Time) bool { return !tm.IsZero() }).Draw(t, "ts").UTC(), p)
		b, err := envelope.Encode(in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := envelope.DecodeAs[envelope.UsagePayload](b)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(in, out, exact); diff != "" {
			t.Fatalf("(-in +out):\n%s", diff)
		}
	})
}
