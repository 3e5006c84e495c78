package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/simulate"
)

// The exactly-once check of story 6 compares usage_record with an oracle.
// When the oracle's own reading of the events sent is short — it judged
// fewer distinct events than were sent, as when its Redis pipeline was
// retried after a slow reply and came back as duplicates — the check says
// so, and never reports "N of 0 events".
func TestJudgedOnce(t *testing.T) {
	now := time.Now()
	ev := func(id string) simulate.Event {
		return envelope.New(id, now, envelope.UsagePayload{FamilyID: 7, CustomerID: 70, AppID: "a", BytesUsed: 1 << 20})
	}
	evs := []simulate.Event{ev("e1"), ev("e2"), ev("e3"), ev("e1")} // e1 replayed
	allowed := func(rem int64) quota.Result { return quota.Result{Decision: policy.Allowed, Remaining: rem} }
	want := map[string]quota.Result{"e1": allowed(3), "e2": allowed(2), "e3": allowed(1)}
	row := func(rem int64) []judgement { return []judgement{{string(policy.Allowed), rem}} }
	persisted := map[string][]judgement{"e1": row(3), "e2": row(2), "e3": row(1)}
	tests := []struct {
		name    string
		want    map[string]quota.Result
		order   []string
		got     map[string][]judgement
		wantErr []string // substrings; nil: no error
		notErr  []string
	}{
		{name: "judged once", want: want, order: []string{"e1", "e2", "e3"}, got: persisted},
		{name: "persisted twice and wrongly", want: want, order: []string{"e1", "e2", "e3"},
			got: map[string][]judgement{"e1": append(row(3), row(3)...), "e2": row(9), "e3": row(1)},
			wantErr: []string{"2 of the 3 distinct events sent not judged exactly once", "e1 (family 7 member 70, 1 MiB): persisted 2 times",
				"e2 (family 7 member 70, 1 MiB): want ALLOWED rem 2 B"}},
		{name: "oracle judged nothing", want: map[string]quota.Result{}, order: nil, got: persisted,
			wantErr: []string{"the oracle is incomplete: it judged 0 of the 3 distinct events sent"}, notErr: []string{"of 0 events"}},
		{name: "oracle judged some", want: map[string]quota.Result{"e3": allowed(1)}, order: []string{"e3"}, got: persisted,
			wantErr: []string{"the oracle is incomplete: it judged 1 of the 3 distinct events sent", "not judged: e1, e2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := judgedOnce(evs, tt.want, tt.order, tt.got)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("judgedOnce: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("judgedOnce: no error")
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not say %q:\n%v", s, err)
				}
			}
			for _, s := range tt.notErr {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error says %q:\n%v", s, err)
				}
			}
		})
	}
}
