package envelope_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
)

func TestDecodeAs(t *testing.T) {
	usage := readFile(t, "testdata/data_usage.json")
	quota := readFile(t, "testdata/notification_quota_updated.json")

	e, err := envelope.DecodeAs[envelope.UsagePayload](usage)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(dataUsageEvent.Payload, envelope.Payload(e.Payload)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if e.EventID != dataUsageEvent.EventID || e.EventType != envelope.TypeDataUsage || !e.Timestamp.Equal(dataUsageEvent.Timestamp) {
		t.Errorf("envelope fields lost: %+v", e)
	}

	p, err := envelope.DecodeAs[*envelope.UsagePayload](usage)
	if err != nil || p.Payload == nil || p.Payload.BytesUsed != 5242880 {
		t.Fatalf("DecodeAs[*UsagePayload] = %+v, %v", p, err)
	}

	n, err := envelope.DecodeAs[envelope.Notification](quota)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Payload.(envelope.QuotaUpdated); !ok {
		t.Errorf("DecodeAs[Notification] payload is %T", n.Payload)
	}

	if _, err := envelope.DecodeAs[envelope.Payload](quota); err != nil {
		t.Errorf("DecodeAs[Payload]: %v", err)
	}

	_, err = envelope.DecodeAs[envelope.QuotaUpdated](usage)
	checkErr(t, err, "eventType", "DATA_USAGE cannot be decoded as envelope.QuotaUpdated", envelope.ErrUnknownType)
	_, err = envelope.DecodeAs[envelope.Notification](usage)
	checkErr(t, err, "eventType", "DATA_USAGE cannot be decoded as envelope.Notification", envelope.ErrUnknownType)
	_, err = envelope.DecodeAs[envelope.ThresholdAlert](quota)
	checkErr(t, err, "eventType", "NOTIFICATION/QUOTA_UPDATED cannot be decoded as envelope.ThresholdAlert", envelope.ErrUnknownType)
	_, err = envelope.DecodeAs[envelope.UsagePayload]([]byte(`{`))
	if !errors.Is(err, envelope.ErrMalformed) {
		t.Errorf("DecodeAs({) = %v", err)
	}
}

func TestEnvelopeJSONInterfaces(t *testing.T) {
	// An envelope inside a larger document, through encoding/json.
	type outbox struct {
		ID    int                                                `json:"id"`
		Event envelope.Event                                     `json:"event"`
		Usage envelope.Envelope[envelope.UsagePayload]           `json:"usage"`
		Ptr   *envelope.Envelope[envelope.ThresholdAlert]        `json:"ptr,omitempty"`
		List  []envelope.Envelope[envelope.PolicyUpdatedPayload] `json:"list,omitempty"`
	}
	usage, err := envelope.DecodeAs[envelope.UsagePayload](readFile(t, "testdata/data_usage.json"))
	if err != nil {
		t.Fatal(err)
	}
	in := outbox{ID: 1, Event: dataUsageEvent, Usage: usage}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out outbox
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out); diff != "" {
		t.Errorf("(-in +out):\n%s", diff)
	}

	// Unmarshal validates and names the field.
	err = json.Unmarshal([]byte(`{"usage":{"eventId":"e","eventType":"DATA_USAGE","timestamp":"2026-02-06T14:30:00Z","payload":{"familyId":1,"customerId":1,"appId":"a","bytesUsed":-1}}}`), &out)
	checkErr(t, err, "payload.bytesUsed", "must be ≥ 0", nil)
	// Marshal validates.
	if _, err := json.Marshal(envelope.Event{}); err == nil {
		t.Error("json.Marshal of an empty Event succeeded")
	}
	var nilEnv *envelope.Event
	if err := nilEnv.UnmarshalJSON([]byte(`{}`)); err == nil {
		t.Error("UnmarshalJSON on nil pointer succeeded")
	}
	var nilPayload *envelope.UsagePayload
	if err := nilPayload.UnmarshalJSON([]byte(`{}`)); err == nil {
		t.Error("UsagePayload.UnmarshalJSON on nil pointer succeeded")
	}
	// A payload decoded on its own, outside an envelope.
	var q envelope.QuotaUpdated
	if err := json.Unmarshal([]byte(`{"familyId":1}`), &q); err == nil || !strings.Contains(err.Error(), "customerId: required") {
		t.Errorf("QuotaUpdated without customerId: %v", err)
	}
	if err := q.UnmarshalJSON([]byte(`[1]`)); err == nil || err.Error() != "must be a JSON object" {
		t.Errorf("QuotaUpdated from an array: %v", err)
	}
}

// A payload type another team adds: pointer receivers, plain struct decoding.
type topUp struct {
	FamilyID int64  `json:"familyId"`
	Bytes    int64  `json:"bytes"`
	By       string `json:"by"`
}

func (*topUp) EventType() envelope.EventType { return "TOP_UP" }
func (*topUp) SubType() envelope.SubType     { return "" }
func (p *topUp) FamilyKey() int64            { return p.FamilyID }
func (p *topUp) Validate() error {
	if p.Bytes <= 0 {
		return &envelope.FieldError{Field: "bytes", Msg: "must be > 0"}
	}
	return nil
}

// A payload whose decoder fails with a plain error.
type picky struct{}

func (picky) EventType() envelope.EventType { return "PICKY" }
func (picky) SubType() envelope.SubType     { return "A" }
func (picky) FamilyKey() int64              { return 1 }
func (picky) Validate() error               { return errors.New("never valid") }
func (*picky) UnmarshalJSON([]byte) error   { return errors.New("picky says no") }

func TestRegistry(t *testing.T) {
	r := envelope.NewRegistry()
	if err := r.Register("TOP_UP", "", func() envelope.Payload { return new(topUp) }); err != nil {
		t.Fatal(err)
	}
	ts := at("2026-02-06T15:00:00Z")
	in := envelope.New[envelope.Payload]("top_1", ts, &topUp{FamilyID: 100, Bytes: 1 << 30, By: "owner"})
	b, err := envelope.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// Built-ins still decode through it; the package-level Decode does not
	// know the new type.
	if _, err := r.Decode(readFile(t, "testdata/data_usage.json")); err != nil {
		t.Error(err)
	}
	_, err = envelope.Decode(b)
	checkErr(t, err, "eventType", `unknown event type "TOP_UP"`, envelope.ErrUnknownType)

	// The custom type's own validation and encoding/json type errors name fields.
	_, err = r.Decode([]byte(`{"eventId":"t","eventType":"TOP_UP","timestamp":"2026-02-06T15:00:00Z","payload":{"familyId":1,"bytes":0}}`))
	checkErr(t, err, "payload.bytes", "must be > 0", nil)
	_, err = r.Decode([]byte(`{"eventId":"t","eventType":"TOP_UP","timestamp":"2026-02-06T15:00:00Z","payload":{"familyId":1,"bytes":"many"}}`))
	checkErr(t, err, "payload.bytes", "cannot decode JSON string into int64", envelope.ErrMalformed)

	if err := r.Register("PICKY", "A", func() envelope.Payload { return new(picky) }); err != nil {
		t.Fatal(err)
	}
	_, err = r.Decode([]byte(`{"eventId":"t","eventType":"PICKY","subType":"A","timestamp":"2026-02-06T15:00:00Z","payload":{}}`))
	checkErr(t, err, "payload", "picky says no", nil)
	_, err = envelope.Encode(envelope.New("p", ts, picky{}))
	checkErr(t, err, "payload", "never valid", nil)
}

func TestRegisterErrors(t *testing.T) {
	r := envelope.NewRegistry()
	newTopUp := func() envelope.Payload { return new(topUp) }
	tests := []struct {
		name string
		t    envelope.EventType
		s    envelope.SubType
		f    func() envelope.Payload
		want string
	}{
		{"empty type", "", "", newTopUp, "empty event type"},
		{"nil constructor", "TOP_UP", "", nil, "nil constructor"},
		{"nil result", "TOP_UP", "", func() envelope.Payload { return nil }, "non-nil pointer"},
		{"nil pointer", "TOP_UP", "", func() envelope.Payload { return (*topUp)(nil) }, "non-nil pointer"},
		{"value", "PICKY", "A", func() envelope.Payload { return picky{} }, "non-nil pointer"},
		{"wrong type", "TOPUP", "", newTopUp, "reports TOP_UP"},
		{"wrong subType", "TOP_UP", "X", newTopUp, "reports TOP_UP"},
		{"built-in", envelope.TypeDataUsage, "", func() envelope.Payload { return new(envelope.UsagePayload) }, "already registered"},
		{"built-in sub", envelope.TypeNotification, envelope.SubQuotaUpdated, func() envelope.Payload { return new(envelope.QuotaUpdated) }, "already registered"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := r.Register(tt.t, tt.s, tt.f)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Register = %v, want …%s…", err, tt.want)
			}
		})
	}
}

func TestZeroRegistry(t *testing.T) {
	var r envelope.Registry
	_, err := r.Decode(readFile(t, "testdata/data_usage.json"))
	checkErr(t, err, "eventType", `unknown event type "DATA_USAGE"`, envelope.ErrUnknownType)
	if err := r.Register(envelope.TypeDataUsage, "", func() envelope.Payload { return new(envelope.UsagePayload) }); err != nil {
		t.Fatal(err)
	}
	ev, err := r.Decode(readFile(t, "testdata/data_usage.json"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(dataUsageEvent, ev); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if err := r.Register(envelope.TypeDataUsage, "", func() envelope.Payload { return new(envelope.UsagePayload) }); err == nil {
		t.Error("second Register of the same pair succeeded")
	}
	// A type with subtypes registered, asked without one.
	if err := r.Register(envelope.TypeNotification, envelope.SubThresholdAlert, func() envelope.Payload { return new(envelope.ThresholdAlert) }); err != nil {
		t.Fatal(err)
	}
	_, err = r.Decode(readFile(t, "testdata/notification_quota_updated.json"))
	checkErr(t, err, "subType", `unknown subType "QUOTA_UPDATED" for NOTIFICATION`, envelope.ErrUnknownType)
}

// A constructor that misbehaves after Register checked it must not panic Decode.
func TestRegistryFickleConstructor(t *testing.T) {
	var r envelope.Registry
	calls := 0
	err := r.Register("TOP_UP", "", func() envelope.Payload {
		calls++
		if calls == 1 {
			return new(topUp)
		}
		return (*topUp)(nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Decode([]byte(`{"eventId":"t","eventType":"TOP_UP","timestamp":"2026-02-06T15:00:00Z","payload":{"familyId":1,"bytes":5}}`))
	checkErr(t, err, "payload", "registered constructor returned", nil)
}

func TestRegistryConcurrent(t *testing.T) {
	r := envelope.NewRegistry()
	data := readFile(t, "testdata/data_usage.json")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 100 {
				if _, err := r.Decode(data); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			et := envelope.EventType(fmt.Sprintf("T%d", i))
			_ = r.Register(et, "", func() envelope.Payload { return &dyn{et} })
		}()
	}
	wg.Wait()
	b, err := envelope.Encode(envelope.New[envelope.Payload]("d", time.Unix(0, 0), &dyn{"T3"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Decode(b); err != nil {
		t.Error(err)
	}
}

type dyn struct{ T envelope.EventType }

func (d *dyn) EventType() envelope.EventType { return d.T }
func (*dyn) SubType() envelope.SubType       { return "" }
func (*dyn) FamilyKey() int64                { return 1 }
func (*dyn) Validate() error                 { return nil }
func (d *dyn) UnmarshalJSON([]byte) error    { return nil }
