package store_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// Charging sessions: opened once per create key, stepped only from where
// they were read, expired, closed and purged.
func testChargingSessions(t *testing.T, e *env) {
	e.Family(t, 100)
	s := store.ChargingSession{Ref: "r1", CreateKey: "k1", FamilyID: 100, MemberID: 1001, Subscriber: "imsi-450051234567890",
		Consumer: "smf-1", NotifyURI: "http://10.0.0.1:8080/n", LastSeq: -1, LastOp: "create",
		Grants: []store.ChargingGrant{{RatingGroup: 10, GrantID: "g10"}}, ExpiresAt: start.Add(time.Hour)}
	got, created, err := e.S.OpenChargingSession(e.Ctx, s)
	if err != nil || !created || got.State != store.ChargingOpen || got.LastSeq != -1 || len(got.Grants) != 1 || !got.ExpiresAt.Equal(start.Add(time.Hour)) {
		t.Fatalf("open: %+v %v %v", got, created, err)
	}
	again := s
	again.Ref = "r2"
	if got, created, err := e.S.OpenChargingSession(e.Ctx, again); err != nil || created || got.Ref != "r1" {
		t.Errorf("open with the same create key: %s %v %v", got.Ref, created, err)
	}
	other := s
	other.Ref, other.CreateKey = "r3", ""
	if _, created, err := e.S.OpenChargingSession(e.Ctx, other); err != nil || !created {
		t.Errorf("open without a key: %v %v", created, err)
	}
	other.Ref = "r4"
	if _, created, err := e.S.OpenChargingSession(e.Ctx, other); err != nil || !created {
		t.Errorf("a second open without a key: %v %v", created, err)
	}
	step := store.ChargingStep{Seq: 0, Op: "create", Answer: []byte(`{"a":1}`), State: store.ChargingOpen, ExpiresAt: start.Add(2 * time.Hour),
		Grants: []store.ChargingGrant{{RatingGroup: 10, GrantID: "g10", Granted: 5, ValidUntil: start.Add(time.Hour)}}}
	if ok, err := e.S.RecordChargingStep(e.Ctx, "r1", -1, step); err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	if ok, err := e.S.RecordChargingStep(e.Ctx, "r1", -1, step); err != nil || ok {
		t.Errorf("record from a stale read: %v %v", ok, err)
	}
	got, err = e.S.ChargingSession(e.Ctx, "r1")
	if err != nil || got.LastSeq != 0 || string(got.Answer) != `{"a":1}` || got.Grants[0].Granted != 5 || !got.Grants[0].ValidUntil.Equal(start.Add(time.Hour)) {
		t.Errorf("after the step: %+v %v", got, err)
	}
	if ok, err := e.S.SetChargingGrants(e.Ctx, "r1", 0, append(got.Grants, store.ChargingGrant{RatingGroup: 20, GrantID: "g20"})); err != nil || !ok {
		t.Errorf("set grants: %v %v", ok, err)
	}
	if ok, err := e.S.SetChargingNotifyURI(e.Ctx, "r1", 0, "http://10.0.0.2:8080/n"); err != nil || !ok {
		t.Errorf("set notify uri: %v %v", ok, err)
	}
	if got, _ := e.S.ChargingSession(e.Ctx, "r1"); got.NotifyURI != "http://10.0.0.2:8080/n" {
		t.Errorf("notify uri after the change: %q", got.NotifyURI)
	}
	if ok, _ := e.S.SetChargingNotifyURI(e.Ctx, "r1", -1, "http://10.0.0.3:8080/n"); ok {
		t.Error("set the notify uri from a stale read")
	}
	if _, err := e.S.ChargingSession(e.Ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown ref: %v", err)
	}
	live, err := e.S.LiveChargingSessions(e.Ctx, 100, 1001)
	if err != nil || len(live) != 3 {
		t.Errorf("live sessions: %d %v", len(live), err)
	}
	if live, _ := e.S.LiveChargingSessions(e.Ctx, 100, 1002); len(live) != 0 {
		t.Errorf("another member's live sessions: %d", len(live))
	}
	var scanned []string
	for after := ""; ; {
		page, err := e.S.OpenChargingSessionsAfter(e.Ctx, after, 2)
		if err != nil {
			t.Fatalf("open sessions after %q: %v", after, err)
		}
		if len(page) == 0 {
			break
		}
		for _, p := range page {
			scanned = append(scanned, p.Ref)
		}
		after = page[len(page)-1].Ref
	}
	if want := []string{"r1", "r3", "r4"}; !slices.Equal(scanned, want) {
		t.Errorf("open sessions, a page of 2 at a time: %v, want %v", scanned, want)
	}
	if _, err := e.S.OpenChargingSessionsAfter(e.Ctx, "", 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("a page of 0: %v", err)
	}
	// r3 and r4 expire at start+1h, r1 at start+2h.
	exp, err := e.S.ExpiredChargingSessions(e.Ctx, start.Add(90*time.Minute), 10)
	if err != nil || len(exp) != 2 {
		t.Fatalf("expired: %d %v", len(exp), err)
	}
	if ok, err := e.S.BeginClosingChargingSession(e.Ctx, "r3", -1); err != nil || !ok {
		t.Errorf("begin closing: %v %v", ok, err)
	}
	if ok, _ := e.S.BeginClosingChargingSession(e.Ctx, "r3", -1); ok {
		t.Error("began closing a closing session")
	}
	if exp, _ := e.S.ExpiredChargingSessions(e.Ctx, start.Add(90*time.Minute), 10); len(exp) != 2 {
		t.Errorf("a closing session is still to sweep: %d", len(exp))
	}
	if err := e.S.FinishClosingChargingSession(e.Ctx, "r3"); err != nil {
		t.Error(err)
	}
	if ok, _ := e.S.RecordChargingStep(e.Ctx, "r3", -1, step); ok {
		t.Error("stepped a closed session")
	}
	release := store.ChargingStep{Seq: 1, Op: "release", State: store.ChargingClosed, ExpiresAt: start}
	if ok, err := e.S.RecordChargingStep(e.Ctx, "r1", 0, release); err != nil || !ok {
		t.Errorf("release: %v %v", ok, err)
	}
	if open, err := e.S.OpenChargingSessionsAfter(e.Ctx, "", 10); err != nil || len(open) != 1 || open[0].Ref != "r4" {
		t.Errorf("open sessions once r1 and r3 closed: %v %v", open, err)
	}
	if n, err := e.S.PurgeChargingSessions(e.Ctx, start, 10); err != nil || n != 0 {
		t.Errorf("purge of sessions closed before they closed: %d %v", n, err)
	}
	e.Clock.Add(48 * time.Hour)
	if n, err := e.S.PurgeChargingSessions(e.Ctx, e.Clock.Now().Add(-24*time.Hour), 10); err != nil || n != 2 {
		t.Errorf("purge: %d %v", n, err)
	}
}

// IMSIs: one per member, one member per IMSI, released when the member is
// removed; found only for current family members.
func testMemberIMSI(t *testing.T, e *env) {
	e.Family(t, 100)
	const imsi = "450051234567890"
	if err := e.S.SetMemberIMSI(e.Ctx, 100, 1001, imsi, admin); err != nil {
		t.Fatal(err)
	}
	if m, err := e.S.MemberByIMSI(e.Ctx, imsi); err != nil || m.ID != 1001 {
		t.Errorf("by imsi: %d %v", m.ID, err)
	}
	wantErr(t, "taken", e.S.SetMemberIMSI(e.Ctx, 100, 1002, imsi, admin), store.ErrConflict)
	wantErr(t, "bad", e.S.SetMemberIMSI(e.Ctx, 100, 1002, "12a45", admin), store.ErrInvalid)
	wantErr(t, "other family", e.S.SetMemberIMSI(e.Ctx, 200, 1002, "45005000000001", admin), store.ErrNotFound)
	if err := e.S.SetMemberIMSI(e.Ctx, 100, 1001, "450050000000002", admin); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.S.MemberIMSI(e.Ctx, 1001); got != "450050000000002" {
		t.Errorf("replaced imsi = %q", got)
	}
	if err := e.S.SetMemberIMSI(e.Ctx, 100, 1002, imsi, admin); err != nil {
		t.Errorf("the freed imsi: %v", err)
	}
	if err := e.S.RemoveMember(e.Ctx, 100, 1002, owner); err != nil {
		t.Fatal(err)
	}
	if _, err := e.S.MemberByIMSI(e.Ctx, imsi); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a removed member's imsi: %v", err)
	}
	if err := e.S.SetMemberIMSI(e.Ctx, 100, 1001, "", admin); err != nil {
		t.Fatal(err)
	}
	if _, err := e.S.MemberByIMSI(e.Ctx, "450050000000002"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a cleared imsi: %v", err)
	}
}

// MSISDNs find the member whose phone they are, however it was typed.
func testMemberMSISDN(t *testing.T, e *env) {
	if _, err := e.S.CreateFamily(e.Ctx, store.NewFamily{ID: 100, Name: "f", PlanBytes: 1}, admin); err != nil {
		t.Fatal(err)
	}
	for id, phone := range map[int64]string{1: "010-1234-5678", 2: "+82 10 2222 3333", 3: "01033334444", 4: "+82-10-5555-6666"} {
		if _, err := e.S.AddMember(e.Ctx, store.NewMember{ID: id, FamilyID: 100, Name: "m", Phone: phone, Role: policy.RoleOwner}, admin); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.S.AddMember(e.Ctx, store.NewMember{ID: 9, Name: "admin", Phone: "010-9999-9999", Role: policy.RoleAdmin}, admin); err != nil {
		t.Fatal(err)
	}
	for msisdn, want := range map[string]int64{"821012345678": 1, "01012345678": 1, "821022223333": 2, "821033334444": 3, "821055556666": 4,
		"821099999999": 0, "8210": 0, "": 0, "82-10": 0} {
		m, err := e.S.MemberByMSISDN(e.Ctx, msisdn)
		if want == 0 {
			wantErr(t, msisdn, err, store.ErrNotFound)
			continue
		}
		if err != nil || m.ID != want {
			t.Errorf("%s: member %d %v, want %d", msisdn, m.ID, err, want)
		}
	}
}

// A batch of steps is recorded an UPDATE per 16 steps, each only where its
// session was read.
func testChargingStepsBatch(t *testing.T, e *env) {
	e.Family(t, 100)
	for _, ref := range []string{"b1", "b2", "b3"} {
		if _, _, err := e.S.OpenChargingSession(e.Ctx, store.ChargingSession{Ref: ref, FamilyID: 100, MemberID: 1001,
			Subscriber: "imsi-450051234567890", Consumer: "smf-1", LastSeq: -1, LastOp: "create", ExpiresAt: start.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	step := store.ChargingStep{Seq: 0, Op: "create", Answer: []byte(`{"b":1}`), State: store.ChargingOpen, ExpiresAt: start.Add(2 * time.Hour),
		Grants: []store.ChargingGrant{{RatingGroup: 10, GrantID: "g", Granted: 7}}}
	closed := store.ChargingStep{Seq: 0, Op: "release", State: store.ChargingClosed, ExpiresAt: start}
	ok, err := e.S.RecordChargingSteps(e.Ctx, []store.ChargingStepOn{{Ref: "b3", PrevSeq: -1, Step: closed},
		{Ref: "b2", PrevSeq: 5, Step: step}, {Ref: "b1", PrevSeq: -1, Step: step}})
	if err != nil || len(ok) != 3 || !ok[0] || ok[1] || !ok[2] {
		t.Fatalf("batch: %v %v; want recorded, stale, recorded", ok, err)
	}
	for ref, want := range map[string]int64{"b1": 0, "b2": -1, "b3": 0} {
		got, err := e.S.ChargingSession(e.Ctx, ref)
		if err != nil || got.LastSeq != want {
			t.Errorf("%s: last_seq %d, %v; want %d", ref, got.LastSeq, err, want)
		}
		if ref == "b1" && (string(got.Answer) != `{"b":1}` || len(got.Grants) != 1 || got.Grants[0].Granted != 7) {
			t.Errorf("b1 after the batch: %+v", got)
		}
		if ref == "b3" && got.State != store.ChargingClosed {
			t.Errorf("b3: state %s", got.State)
		}
	}
	if ok, err := e.S.RecordChargingSteps(e.Ctx, nil); err != nil || len(ok) != 0 {
		t.Errorf("an empty batch: %v %v", ok, err)
	}

	// Batches whose sessions are where they were read are written by one
	// UPDATE per 16 steps, each row its own values; a batch one of whose
	// sessions moved on is written a step a statement, that one refused.
	var refs []string
	for i := range 37 {
		ref := fmt.Sprintf("m%02d", i)
		refs = append(refs, ref)
		if _, _, err := e.S.OpenChargingSession(e.Ctx, store.ChargingSession{Ref: ref, FamilyID: 100, MemberID: 1001,
			Subscriber: "imsi-450051234567890", Consumer: "smf-1", LastSeq: -1, LastOp: "create", ExpiresAt: start.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	stepOf := func(i int, seq int64) store.ChargingStep {
		st := store.ChargingStep{Seq: seq, Op: "update", Answer: fmt.Appendf(nil, `{"i":%d,"seq":%d}`, i, seq), State: store.ChargingOpen,
			ExpiresAt: start.Add(time.Duration(i) * time.Minute), Grants: []store.ChargingGrant{{RatingGroup: uint32(i), GrantID: refs[i], Granted: int64(i)}}}
		if i%5 == 4 {
			st.Op, st.Answer, st.Grants, st.State = "release", nil, nil, store.ChargingClosed
		}
		return st
	}
	batch := func(seq, prev int64, idx []int, want []bool) {
		t.Helper()
		var on []store.ChargingStepOn
		for _, i := range idx {
			on = append(on, store.ChargingStepOn{Ref: refs[i], PrevSeq: prev, Step: stepOf(i, seq)})
		}
		ok, err := e.S.RecordChargingSteps(e.Ctx, on)
		if err != nil || !slices.Equal(ok, want) {
			t.Fatalf("batch of %d at seq %d: %v %v, want %v", len(idx), seq, ok, err, want)
		}
	}
	all := make([]int, 37)
	for i := range all {
		all[i] = 36 - i // not in the refs' order
	}
	batch(1, -1, []int{1, 0}, []bool{true, true})
	wantAll := make([]bool, 37)
	for k, i := range all {
		wantAll[k] = i > 1 // m00 and m01 are at seq 1 already
	}
	batch(2, -1, all, wantAll)
	var open []int
	for i := 2; len(open) < 16; i++ {
		if i%5 != 4 {
			open = append(open, i)
		}
	}
	batch(3, 2, open, slices.Repeat([]bool{true}, 16))
	for i, ref := range refs {
		seq := int64(2)
		switch {
		case i < 2:
			seq = 1
		case slices.Contains(open, i):
			seq = 3
		}
		want := stepOf(i, seq)
		got, err := e.S.ChargingSession(e.Ctx, ref)
		if err != nil || got.LastSeq != seq || got.LastOp != want.Op || string(got.Answer) != string(want.Answer) ||
			got.State != want.State || (want.State == store.ChargingOpen && !got.ExpiresAt.Equal(want.ExpiresAt)) ||
			!cmp.Equal(got.Grants, want.Grants, cmpopts.EquateEmpty(), cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })) {
			t.Errorf("%s: %+v, %v; want the step %+v", ref, got, err, want)
		}
	}

	// A batch whose last UPDATE writes one step (16 + 1): that statement
	// has the many-step form's arguments too (it failed with "expected 10
	// arguments, got 16", every step of the batch refused, in the grant
	// path's benchmark on 2026-11-28).
	var seventeen []int
	for i := range 17 {
		if i%5 != 4 {
			seventeen = append(seventeen, i)
		}
	}
	for i := 17; len(seventeen) < 17; i++ {
		if i%5 != 4 {
			seventeen = append(seventeen, i)
		}
	}
	for _, i := range seventeen {
		seq := int64(2)
		if i < 2 {
			seq = 1
		} else if slices.Contains(open, i) {
			seq = 3
		}
		if _, err := e.S.RecordChargingSteps(e.Ctx, []store.ChargingStepOn{{Ref: refs[i], PrevSeq: seq, Step: stepOf(i, 9)}}); err != nil {
			t.Fatal(err)
		}
	}
	batch(10, 9, seventeen, slices.Repeat([]bool{true}, 17))
	for _, i := range seventeen {
		if got, err := e.S.ChargingSession(e.Ctx, refs[i]); err != nil || got.LastSeq != 10 || string(got.Answer) != string(stepOf(i, 10).Answer) {
			t.Errorf("%s after the batch of 17: %+v, %v", refs[i], got, err)
		}
	}

	// Another process answered the same invocation of one session first
	// (the same seq, another answer): that step is not recorded, the
	// others of its statement are, and the session keeps the other's. The
	// clock is off the millisecond: updated_at keeps milliseconds, and
	// what the statement wrote is still recognised.
	e.Clock.Add(1234567 * time.Nanosecond)
	other := stepOf(seventeen[3], 11)
	other.Answer = []byte(`{"another":"process"}`)
	if ok, err := e.S.RecordChargingStep(e.Ctx, refs[seventeen[3]], 10, other); err != nil || !ok {
		t.Fatalf("the other process's step: %v %v", ok, err)
	}
	want := slices.Repeat([]bool{true}, 5)
	want[3] = false
	batch(11, 10, seventeen[:5], want)
	if got, err := e.S.ChargingSession(e.Ctx, refs[seventeen[3]]); err != nil || string(got.Answer) != `{"another":"process"}` {
		t.Errorf("the session another process stepped: %+v, %v", got, err)
	}
}
