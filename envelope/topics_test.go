package envelope_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
)

func TestTopics(t *testing.T) {
	got := []string{envelope.TopicUsageEvents, envelope.TopicPolicyUpdated, envelope.TopicUsagePersist, envelope.TopicNotificationEvents, envelope.DLT(envelope.TopicUsageEvents)}
	want := []string{"usage-events", "policy-updated", "usage-persist", "notification-events", "usage-events.DLT"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
