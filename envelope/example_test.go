package envelope_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/dabom/dpcs/envelope"
)

// A producer builds a typed envelope and encodes it; Encode validates first.
func ExampleEncode() {
	e := envelope.New("evt_550e8400-e29b-41d4-a716-446655440000",
		time.Date(2026, 2, 6, 23, 30, 0, 0, time.FixedZone("KST", 9*3600)),
		envelope.UsagePayload{
			FamilyID: 100, CustomerID: 12345, AppID: "com.youtube.app", BytesUsed: 5242880,
			Metadata: map[string]any{"deviceId": "device_pixel_9", "networkType": "5G"},
		})
	b, err := envelope.Encode(e)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(b))
	// Output:
	// {"eventId":"evt_550e8400-e29b-41d4-a716-446655440000","eventType":"DATA_USAGE","timestamp":"2026-02-06T14:30:00Z","payload":{"familyId":100,"customerId":12345,"appId":"com.youtube.app","bytesUsed":5242880,"metadata":{"deviceId":"device_pixel_9","networkType":"5G"}}}
}

// A consumer of several event types decodes into an Event and switches on
// the payload's type.
func ExampleDecode() {
	data := []byte(`{"eventId":"ntf_1","eventType":"NOTIFICATION","subType":"THRESHOLD_ALERT",
		"timestamp":"2026-02-06T14:40:00Z",
		"payload":{"familyId":100,"thresholdPercent":10,"message":"가족 데이터가 10% 미만입니다! 데이터를 충전해주세요."}}`)
	ev, err := envelope.Decode(data)
	if err != nil {
		fmt.Println(err)
		return
	}
	switch p := ev.Payload.(type) {
	case envelope.UsagePayload:
		fmt.Println("usage of", p.BytesUsed, "bytes")
	case envelope.ThresholdAlert:
		fmt.Printf("family %d below %d%%: %s\n", p.FamilyID, p.ThresholdPercent, p.Message)
	}
	// Output:
	// family 100 below 10%: 가족 데이터가 10% 미만입니다! 데이터를 충전해주세요.
}

// Errors name the field; errors.As gives the first problem, errors.Is the kind.
func ExampleDecode_errors() {
	for _, data := range []string{
		`{"eventId":"evt_1","eventType":"DATA_USAGE","timestamp":"2026-02-06T14:30:00Z",
		  "payload":{"familyId":100,"customerId":12345,"appId":"com.youtube.app","bytesUsed":-1}}`,
		`{"eventId":"evt_1","eventType":"DATA_USAGE","timestamp":"2026-02-06T14:30:00Z",
		  "payload":{"familyId":100,"customerId":12345,"appId":"com.youtube.app"}}`,
		`{"eventId":"evt_1","eventType":"TOP_UP","timestamp":"2026-02-06T14:30:00Z","payload":{}}`,
		`{"eventId":"evt_1",`,
	} {
		_, err := envelope.Decode([]byte(data))
		var fe *envelope.FieldError
		if errors.As(err, &fe) {
			fmt.Printf("%s | field=%s unknownType=%v\n", err, fe.Field, errors.Is(err, envelope.ErrUnknownType))
		} else {
			fmt.Printf("%s | malformed=%v\n", err, errors.Is(err, envelope.ErrMalformed))
		}
	}
	// Output:
	// payload.bytesUsed: must be ≥ 0 | field=payload.bytesUsed unknownType=false
	// payload.bytesUsed: required | field=payload.bytesUsed unknownType=false
	// eventType: unknown event type "TOP_UP" | field=eventType unknownType=true
	// malformed event: unexpected end of JSON input | malformed=true
}

// A consumer of one topic decodes straight into the payload type it expects.
func ExampleDecodeAs() {
	data := []byte(`{"eventId":"evt_550e8400-e29b-41d4-a716-446655440000","eventType":"DATA_USAGE","subType":null,
		"timestamp":"2026-02-06T14:30:00Z",
		"payload":{"familyId":100,"customerId":12345,"appId":"com.youtube.app","bytesUsed":5242880}}`)
	e, err := envelope.DecodeAs[envelope.UsagePayload](data)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(e.EventID, e.Payload.FamilyID, e.Payload.BytesUsed, e.Timestamp)

	_, err = envelope.DecodeAs[envelope.Notification](data)
	fmt.Println(err)
	// Output:
	// evt_550e8400-e29b-41d4-a716-446655440000 100 5242880 2026-02-06 14:30:00 +0000 UTC
	// eventType: DATA_USAGE cannot be decoded as envelope.Notification
}

// Records derived from one event get ids derived from its id, so a replay
// re-emits them unchanged and downstream consumers deduplicate.
func ExampleDerivedID() {
	origin := "evt_550e8400-e29b-41d4-a716-446655440000"
	fmt.Println(envelope.DerivedID(envelope.PrefixPersist, origin, "persist"))
	fmt.Println(envelope.DerivedID(envelope.PrefixNotification, origin, "quota-updated"))
	fmt.Println(envelope.DerivedID(envelope.PrefixPersist, origin, "persist") ==
		envelope.DerivedID(envelope.PrefixPersist, origin, "persist"))
	// Output:
	// persist_ffc403c7-b717-5467-b23c-a1aee8022cc7
	// ntf_d1c968c6-1d31-547b-b5c6-03d3e46e2f8f
	// true
}

// TopUp is a payload type another team adds to its own registry.
type TopUp struct {
	FamilyID int64 `json:"familyId"`
	Bytes    int64 `json:"bytes"`
}

func (TopUp) EventType() envelope.EventType { return "TOP_UP" }
func (TopUp) SubType() envelope.SubType     { return "" }
func (p TopUp) FamilyKey() int64            { return p.FamilyID }
func (p TopUp) Validate() error {
	if p.Bytes <= 0 {
		return &envelope.FieldError{Field: "bytes", Msg: "must be > 0"}
	}
	return nil
}

func ExampleRegistry_Register() {
	r := envelope.NewRegistry() // the built-in types, plus:
	if err := r.Register("TOP_UP", "", func() envelope.Payload { return new(TopUp) }); err != nil {
		fmt.Println(err)
		return
	}
	ev, err := r.Decode([]byte(`{"eventId":"top_1","eventType":"TOP_UP","timestamp":"2026-02-06T15:00:00Z","payload":{"familyId":100,"bytes":1073741824}}`))
	fmt.Printf("%#v %v\n", ev.Payload, err)
	_, err = r.Decode([]byte(`{"eventId":"top_1","eventType":"TOP_UP","timestamp":"2026-02-06T15:00:00Z","payload":{"familyId":100,"bytes":0}}`))
	fmt.Println(err)
	// Output:
	// envelope_test.TopUp{FamilyID:100, Bytes:1073741824} <nil>
	// payload.bytes: must be > 0
}
