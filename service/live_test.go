package service

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/family"
	"github.com/dabom/dpcs/service/store"
)

// LiveChanges tells every committed family change, but a care agent's
// note, as a FAMILY_CHANGED the whole family sees.
func TestLiveChanges(t *testing.T) {
	live := &fakeLive{}
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	hook := LiveChanges(live, nil, func() time.Time { return at })
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the request may be answered already: the publish goes on
	hook(ctx, family.Change{Kind: family.KindPolicy, FamilyID: 100, Members: []int64{1002}, By: store.Actor{ID: 1000, Role: policy.RoleOwner}})
	hook(ctx, family.Change{Kind: family.KindNote, FamilyID: 100, By: store.Actor{ID: 2, Role: policy.RoleAgent}})
	hook(ctx, family.Change{Kind: family.KindTopUp})
	if len(live.notes) != 1 {
		t.Fatalf("published %d, want the policy change only: %+v", len(live.notes), live.notes)
	}
	n := live.notes[0]
	var c notify.FamilyChange
	if err := json.Unmarshal(n.Payload, &c); err != nil {
		t.Fatal(err)
	}
	if n.Kind != notify.KindFamilyChanged || n.FamilyID != 100 || n.MemberID != 0 || n.ID != 0 || !n.CreatedAt.Equal(at) ||
		!cmp.Equal(c, notify.FamilyChange{Change: "POLICY", Members: []int64{1002}, By: 1000}) {
		t.Errorf("published %+v (payload %+v)", n, c)
	}
	if !(notify.Filter{MemberID: 1003, Role: notify.RoleMember}).Sees(n) {
		t.Error("another member of the family does not see it")
	}
}
