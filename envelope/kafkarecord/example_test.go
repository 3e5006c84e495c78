package kafkarecord_test

import (
	"fmt"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
)

func ExampleNew() {
	e := envelope.New("ntf_1", time.Date(2026, 2, 6, 14, 32, 0, 0, time.UTC), envelope.CustomerBlocked{
		FamilyID: 100, CustomerID: 12346, BlockReason: "LIMIT:DATA:DAILY",
		BlockedAt: time.Date(2026, 2, 6, 14, 32, 0, 0, time.UTC),
	})
	r, err := kafkarecord.New(envelope.TopicNotificationEvents, e)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("topic=%s key=%s\n", r.Topic, r.Key)
	for _, h := range r.Headers {
		fmt.Printf("header %s=%s\n", h.Key, h.Value)
	}
	fmt.Println(string(r.Value))
	// Output:
	// topic=notification-events key=100
	// header eventType=NOTIFICATION
	// header subType=CUSTOMER_BLOCKED
	// {"eventId":"ntf_1","eventType":"NOTIFICATION","subType":"CUSTOMER_BLOCKED","timestamp":"2026-02-06T14:32:00Z","payload":{"familyId":100,"customerId":12346,"blockReason":"LIMIT:DATA:DAILY","blockedAt":"2026-02-06T14:32:00Z"}}
}
