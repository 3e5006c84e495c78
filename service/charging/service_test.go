package charging_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/charging"
	"github.com/dabom/dpcs/service/store"
)

// A session's life: the create reserves, the update charges what was used
// and reserves again, the release charges the rest of the usage and returns
// every reservation.
func TestCreateUpdateRelease(t *testing.T) {
	e := newEnv(t)
	ref, resp, err := e.svc.Create(e.ctx, request("imsi-"+childIMSI, 0, ask(10, 10*mib, -1), ask(1, 0, -1)))
	if err != nil {
		t.Fatal(err)
	}
	u := unit(t, resp, 10)
	if u.ResultCode != charging.ResultSuccess || granted(u) != 10*mib || *u.VolumeQuotaThreshold != 2*mib ||
		*u.ValidityTime != 3600 || *u.QuotaHoldingTime != 300 || u.FinalUnitIndication != nil {
		t.Errorf("rating group 10 = %+v", u)
	}
	if g := granted(unit(t, resp, 1)); g != charging.DefaultGrant {
		t.Errorf("rating group 1 (no volume asked) granted %d, want the default %d", g, charging.DefaultGrant)
	}
	if r := e.fake.Reserved(charging.GrantID(ref, 10)); r != 10*mib {
		t.Errorf("reserved %d", r)
	}
	ops := e.fake.Ops()
	if ops[0].Category != policy.CategoryVideo || ops[1].Category != "" || ops[0].CustomerID != child || ops[0].FamilyID != family {
		t.Errorf("steps = %+v", ops)
	}

	resp, err = e.svc.Update(e.ctx, ref, request("imsi-"+childIMSI, 1, ask(10, 0, 8*mib)))
	if err != nil {
		t.Fatal(err)
	}
	if g := granted(unit(t, resp, 10)); g != charging.DefaultGrant {
		t.Errorf("update granted %d", g)
	}
	if _, used, reserved := e.fake.Pool(family); used != 8*mib || reserved != 20*mib {
		t.Errorf("after the update: used %d reserved %d", used, reserved)
	}

	if err := e.svc.Release(e.ctx, ref, request("imsi-"+childIMSI, 2, report(10, 3*mib))); err != nil {
		t.Fatal(err)
	}
	if _, used, reserved := e.fake.Pool(family); used != 11*mib || reserved != 0 {
		t.Errorf("after the release: used %d reserved %d, want 11 MiB and nothing held", used, reserved)
	}
	sess, err := e.st.S.ChargingSession(e.ctx, ref)
	if err != nil || sess.State != store.ChargingClosed || len(sess.Grants) != 0 {
		t.Errorf("session = %+v, %v", sess, err)
	}
	if err := e.fake.Check(); err != nil {
		t.Error(err)
	}
}

// A retry of an invocation is answered as the first was and charges
// nothing more; an older invocation is refused; once released, only the
// release's retry is answered.
func TestRetriesChargeOnce(t *testing.T) {
	e := newEnv(t)
	ref, _, err := e.svc.Create(e.ctx, request("msisdn-821012345678", 7, ask(10, 10*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	upd := request("msisdn-821012345678", 8, ask(10, 5*mib, 8*mib))
	first, err := e.svc.Update(e.ctx, ref, upd)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Add(time.Minute)
	for range 3 {
		again, err := e.svc.Update(e.ctx, ref, upd)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(first, again); diff != "" {
			t.Errorf("retry answered differently (-first +retry):\n%s", diff)
		}
	}
	if _, used, reserved := e.fake.Pool(family); used != 8*mib || reserved != 5*mib {
		t.Errorf("used %d reserved %d after retries, want 8 MiB and 5 MiB", used, reserved)
	}
	_, err = e.svc.Update(e.ctx, ref, request("msisdn-821012345678", 7, ask(10, 5*mib, 1)))
	wantProblem(t, err, http.StatusBadRequest, charging.CauseMandatoryIEIncorrect, "/invocationSequenceNumber")

	rel := request("msisdn-821012345678", 9, report(10, 1*mib))
	for range 2 {
		if err := e.svc.Release(e.ctx, ref, rel); err != nil {
			t.Fatal(err)
		}
	}
	if _, used, reserved := e.fake.Pool(family); used != 9*mib || reserved != 0 {
		t.Errorf("used %d reserved %d after the release twice", used, reserved)
	}
	_, err = e.svc.Update(e.ctx, ref, request("msisdn-821012345678", 10, ask(10, 5*mib, 0)))
	wantProblem(t, err, http.StatusNotFound, charging.CauseResourceContextNotFound, "")
	_, err = e.svc.Update(e.ctx, "no-such-ref", request("msisdn-821012345678", 1, ask(10, 5*mib, 0)))
	wantProblem(t, err, http.StatusNotFound, charging.CauseResourceContextNotFound, "")
}

// A step the Charger could not take answers SYSTEM_FAILURE and charges
// nothing; its retry takes it once.
func TestFailedStepIsRetried(t *testing.T) {
	e := newEnv(t)
	ref, _, err := e.svc.Create(e.ctx, request("imsi-"+childIMSI, 0, ask(10, 10*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	upd := request("imsi-"+childIMSI, 1, ask(10, 10*mib, 4*mib))
	e.fake.FailNext(1)
	_, err = e.svc.Update(e.ctx, ref, upd)
	wantProblem(t, err, http.StatusInternalServerError, charging.CauseSystemFailure, "")
	if _, used, _ := e.fake.Pool(family); used != 0 {
		t.Errorf("a failed step charged %d", used)
	}
	if _, err := e.svc.Update(e.ctx, ref, upd); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Update(e.ctx, ref, upd); err != nil {
		t.Fatal(err)
	}
	if _, used, reserved := e.fake.Pool(family); used != 4*mib || reserved != 10*mib {
		t.Errorf("used %d reserved %d", used, reserved)
	}
}

// failingSessions fails RecordChargingSteps while fail is set: the crash
// between the Charger's answer and the session's record.
type failingSessions struct {
	charging.Sessions
	mu   sync.Mutex
	fail bool
}

func (f *failingSessions) RecordChargingSteps(ctx context.Context, steps []store.ChargingStepOn) ([]bool, error) {
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail {
		return nil, context.DeadlineExceeded
	}
	return f.Sessions.RecordChargingSteps(ctx, steps)
}

// A create whose answer could not be stored after the Charger reserved
// (the process died between the two) leaves a session the sweep closes: its
// reservation is returned once the session expires.
func TestSweepReleasesWhatALostSessionHeld(t *testing.T) {
	e := newEnv(t)
	fs := &failingSessions{Sessions: e.st.S, fail: true}
	svc := e.service(e.fake, fs, charging.WithValidity(10*time.Minute), charging.WithQuotaHoldingTime(time.Minute))
	_, _, err := svc.Create(e.ctx, request("imsi-"+childIMSI, 0, ask(10, 10*mib, -1), ask(20, 5*mib, -1)))
	wantProblem(t, err, http.StatusInternalServerError, charging.CauseSystemFailure, "")
	if _, _, reserved := e.fake.Pool(family); reserved != 15*mib {
		t.Fatalf("reserved %d: the Charger took the steps before the record failed", reserved)
	}
	fs.mu.Lock()
	fs.fail = false
	fs.mu.Unlock()
	// An answered session, idle too.
	ref, _, err := svc.Create(e.ctx, request("msisdn-821022223333", 0, ask(30, 1*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Add(10*time.Minute + 59*time.Second)
	if info, err := svc.Sweep(e.ctx); err != nil || info.Closed != 0 {
		t.Fatalf("sweep before the expiry: %+v, %v", info, err)
	}
	e.clock.Add(2 * time.Second)
	info, err := svc.Sweep(e.ctx)
	if err != nil || info.Closed != 2 {
		t.Fatalf("sweep: %+v, %v", info, err)
	}
	if _, _, reserved := e.fake.Pool(family); reserved != 0 || e.fake.Outstanding() != 0 {
		t.Errorf("after the sweep %d bytes are still reserved", reserved)
	}
	_, err = svc.Update(e.ctx, ref, request("msisdn-821022223333", 1, ask(30, 1*mib, 1)))
	wantProblem(t, err, http.StatusNotFound, charging.CauseResourceContextNotFound, "")
	e.clock.Add(25 * time.Hour)
	if info, err := svc.Sweep(e.ctx); err != nil || info.Purged != 2 {
		t.Errorf("purge: %+v, %v", info, err)
	}
}

// A release the sweep could not take is taken by the next sweep; an update
// keeps a session from expiring.
func TestSweepRetriesAndUpdatesKeepSessions(t *testing.T) {
	e := newEnv(t, charging.WithValidity(10*time.Minute), charging.WithQuotaHoldingTime(time.Minute))
	idle, _, err := e.svc.Create(e.ctx, request("imsi-"+childIMSI, 0, ask(10, 10*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	busy, _, err := e.svc.Create(e.ctx, request("msisdn-01012345678", 0, ask(10, 10*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Add(9 * time.Minute)
	if _, err := e.svc.Update(e.ctx, busy, request("msisdn-01012345678", 1, ask(10, 10*mib, 9*mib))); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(3 * time.Minute)
	e.fake.FailNext(1)
	info, err := e.svc.Sweep(e.ctx)
	if err == nil || info.Failed != 1 || info.Closed != 0 {
		t.Fatalf("sweep with a failing Charger: %+v, %v", info, err)
	}
	if s, _ := e.st.S.ChargingSession(e.ctx, idle); s.State != store.ChargingClosing {
		t.Errorf("state after a failed release: %s", s.State)
	}
	if info, err := e.svc.Sweep(e.ctx); err != nil || info.Closed != 1 {
		t.Fatalf("second sweep: %+v, %v", info, err)
	}
	if e.fake.Reserved(charging.GrantID(idle, 10)) != 0 || e.fake.Reserved(charging.GrantID(busy, 10)) != 10*mib {
		t.Errorf("the idle session's grant is held or the busy one's was released")
	}
}

// Two creates at once are two sessions, as are two creates of different
// PDU sessions; a create repeated (the same charging ids and invocation)
// is the same session with the same answer.
func TestCreatesMakeSessions(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	refs := make([]string, 8)
	errs := make([]error, len(refs))
	for i := range refs {
		wg.Go(func() {
			req := request("imsi-"+childIMSI, 0, ask(10, 1*mib, -1))
			if i%2 == 1 { // distinct PDU sessions, each with its charging id
				req.ChargingID = u32(uint32(1000 + i))
			}
			refs[i], _, errs[i] = e.svc.Create(context.Background(), req)
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, ref := range refs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if seen[ref] {
			t.Errorf("two creates answered with the same ChargingDataRef %s", ref)
		}
		seen[ref] = true
	}
	if _, _, reserved := e.fake.Pool(family); reserved != 8*mib {
		t.Errorf("reserved %d for 8 sessions of 1 MiB", reserved)
	}

	req := readRequest(t, "request-create.json", charging.OpCreate)
	ref1, resp1, err := e.svc.Create(e.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Add(time.Second)
	ref2, resp2, err := e.svc.Create(e.ctx, readRequest(t, "request-create.json", charging.OpCreate))
	if err != nil {
		t.Fatal(err)
	}
	if ref1 != ref2 || !cmp.Equal(resp1, resp2) {
		t.Errorf("the create's retry: %s %+v, first %s %+v", ref2, resp2, ref1, resp1)
	}
	if _, _, reserved := e.fake.Pool(family); reserved != 8*mib+10*mib+charging.DefaultGrant {
		t.Errorf("reserved %d: the retry reserved again", reserved)
	}
}

// Subscribers are found by IMSI or by MSISDN however the phone was typed,
// else by the served GPSI; an unknown one is USER_UNKNOWN.
func TestSubscribers(t *testing.T) {
	e := newEnv(t)
	for sub, want := range map[string]int64{
		"imsi-" + childIMSI:   child,
		"msisdn-821012345678": dad, // stored 010-1234-5678
		"msisdn-01012345678":  dad,
		"msisdn-821022223333": mom, // stored +82 10 2222 3333
	} {
		if _, _, err := e.svc.Create(e.ctx, request(sub, 0, ask(10, 1, -1))); err != nil {
			t.Errorf("%s: %v", sub, err)
			continue
		}
		if ops := e.fake.Ops(); ops[len(ops)-1].CustomerID != want {
			t.Errorf("%s charged member %d, want %d", sub, ops[len(ops)-1].CustomerID, want)
		}
	}
	for _, sub := range []string{"imsi-450059999999999", "msisdn-821099999999", "nai-someone@example.com", "gci-x"} {
		_, _, err := e.svc.Create(e.ctx, request(sub, 0, ask(10, 1, -1)))
		wantProblem(t, err, http.StatusNotFound, charging.CauseUserUnknown, "")
	}
	_, _, err := e.svc.Create(e.ctx, request("imsi-45005x", 0))
	wantProblem(t, err, http.StatusBadRequest, charging.CauseMandatoryIEIncorrect, "/subscriberIdentifier")

	req := request("imsi-450059999999999", 0, ask(10, 1, -1))
	req.PDUSessionChargingInformation = &charging.PDUSessionChargingInformation{
		UserInformation: &charging.UserInformation{ServedGPSI: "msisdn-821012345678"}}
	if _, _, err := e.svc.Create(e.ctx, req); err != nil {
		t.Errorf("an unknown IMSI with a known GPSI: %v", err)
	}
	// A removed member is unknown, its IMSI free for another.
	if err := e.st.S.RemoveMember(e.ctx, family, child, store.System); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.svc.Create(e.ctx, request("imsi-"+childIMSI, 0))
	wantProblem(t, err, http.StatusNotFound, charging.CauseUserUnknown, "")
	if err := e.st.S.SetMemberIMSI(e.ctx, family, mom, childIMSI, store.System); err != nil {
		t.Errorf("the removed member's IMSI: %v", err)
	}
	if err := e.st.S.SetMemberIMSI(e.ctx, family, dad, childIMSI, store.System); !errors.Is(err, store.ErrConflict) {
		t.Errorf("another current member's IMSI: %v, want ErrConflict", err)
	}
}

// Rating groups map to what the operator set: a category, an app, or any
// traffic.
func TestRatingGroups(t *testing.T) {
	groups, err := charging.ParseRatingGroups("10=video, 11=app:com.youtube.app")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, charging.WithRatingGroups(groups))
	if _, _, err := e.svc.Create(e.ctx, request("imsi-"+childIMSI, 0, ask(10, 1, -1), ask(11, 1, -1), ask(99, 1, -1))); err != nil {
		t.Fatal(err)
	}
	ops := e.fake.Ops()
	got := [][2]string{{ops[0].AppID, string(ops[0].Category)}, {ops[1].AppID, string(ops[1].Category)}, {ops[2].AppID, string(ops[2].Category)}}
	if want := [][2]string{{"", "VIDEO"}, {"com.youtube.app", ""}, {"", ""}}; !cmp.Equal(want, got) {
		t.Errorf("coverage = %v, want %v", got, want)
	}
	for _, bad := range []string{"10", "x=VIDEO", "10=SPORTS", "10=VIDEO,10=GAME", "10=app:", "4294967296=WEB"} {
		if _, err := charging.ParseRatingGroups(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
	if g, err := charging.ParseRatingGroups(charging.DefaultRatingGroups); err != nil || len(g) != len(policy.Categories()) {
		t.Errorf("the default mapping: %v, %v", g, err)
	}
}

// DPCS_GRANT_CHARGED names traffic as the rating groups do: categories and
// apps, or all; nothing when empty.
func TestParseGrantCharged(t *testing.T) {
	if f, err := charging.ParseGrantCharged(" "); f != nil || err != nil {
		t.Errorf("empty: %v, %v; want none", f != nil, err)
	}
	all, err := charging.ParseGrantCharged("ALL")
	if err != nil || !all("any.app", "") {
		t.Errorf("all: %v", err)
	}
	f, err := charging.ParseGrantCharged("video, app:com.kakao.talk")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		app  string
		cat  policy.Category
		want bool
	}{{"com.youtube.app", policy.CategoryVideo, true}, {"com.kakao.talk", policy.CategoryMessaging, true},
		{"com.whatsapp", policy.CategoryMessaging, false}, {"unknown.app", "", false}} {
		if got := f(c.app, c.cat); got != c.want {
			t.Errorf("%s (%s): %v, want %v", c.app, c.cat, got, c.want)
		}
	}
	for _, bad := range []string{"SPORTS", "app:", "VIDEO,,x=y"} {
		if _, err := charging.ParseGrantCharged(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

// The last units come with finalUnitIndication: TERMINATE, REDIRECT to the
// block screen when one is set, RESTRICT_ACCESS for a throttled member; a
// blocked member's rating group is refused with its reason and a validity
// that ends when the block may lift.
func TestFinalUnits(t *testing.T) {
	e := newEnv(t)
	e.fake.SetPool(family, 15*mib)
	if _, _, err := e.svc.Create(e.ctx, request("imsi-"+childIMSI, 0, ask(10, 10*mib, -1))); err != nil {
		t.Fatal(err)
	}
	_, resp, err := e.svc.Create(e.ctx, request("msisdn-821012345678", 0, ask(10, 10*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	u := unit(t, resp, 10)
	if granted(u) != 5*mib || u.FinalUnitIndication == nil || u.FinalUnitIndication.FinalUnitAction != charging.ActionTerminate ||
		u.VolumeQuotaThreshold != nil {
		t.Errorf("the pool's last 5 MiB: %+v", u)
	}
	_, resp, err = e.svc.Create(e.ctx, request("msisdn-821022223333", 0, ask(10, 10*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	if u := unit(t, resp, 10); u.ResultCode != charging.ResultQuotaLimitReached || granted(u) != 0 ||
		u.FinalUnitIndication.FinalUnitAction != charging.ActionTerminate {
		t.Errorf("nothing left: %+v", u)
	}

	r := newEnv(t, charging.WithRedirect("https://dpcs.example.net/app/#blocked"))
	lift := r.clock.Now().Add(90 * time.Minute).Truncate(time.Second)
	r.fake.Block(child, policy.BlockedTime)
	r.fake.ValidUntil(lift.Add(-time.Hour))
	_, resp, err = r.svc.Create(r.ctx, request("imsi-"+childIMSI, 0, ask(10, 10*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	u = unit(t, resp, 10)
	want := &charging.FinalUnitIndication{FinalUnitAction: charging.ActionRedirect, RedirectServer: &charging.RedirectServer{
		RedirectAddressType: "URL", RedirectServerAddress: "https://dpcs.example.net/app/#blocked?reason=BLOCKED_TIME"}}
	if u.ResultCode != charging.ResultEndUserServiceDenied || granted(u) != 0 || *u.ValidityTime != 1800 || !cmp.Equal(want, u.FinalUnitIndication) {
		t.Errorf("blocked: %+v %+v", u, u.FinalUnitIndication)
	}
	r.fake.Block(child, policy.Allowed)
	r.fake.Throttle(dad, 512)
	r.fake.SetPool(family, 3*mib)
	_, resp, err = r.svc.Create(r.ctx, request("msisdn-821012345678", 0, ask(10, 10*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	if u := unit(t, resp, 10); u.FinalUnitIndication == nil || u.FinalUnitIndication.FinalUnitAction != charging.ActionRestrictAccess ||
		u.FinalUnitIndication.FilterID != charging.DefaultRestrictFilter {
		t.Errorf("throttled: %+v", u.FinalUnitIndication)
	}
}

// What the steps carry: ids derived from the session, the rating group and
// the invocation; one reservation per rating group across steps.
func TestStepIDs(t *testing.T) {
	e := newEnv(t)
	ref, _, err := e.svc.Create(e.ctx, request("imsi-"+childIMSI, 3, ask(10, 1*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Update(e.ctx, ref, request("imsi-"+childIMSI, 4, ask(10, 1*mib, 1))); err != nil {
		t.Fatal(err)
	}
	ops := e.fake.Ops()
	want := []quota.GrantOp{
		{ID: charging.StepID(ref, 10, 3), GrantID: charging.GrantID(ref, 10), Requested: 1 * mib},
		{ID: charging.StepID(ref, 10, 4), GrantID: charging.GrantID(ref, 10), Requested: 1 * mib, Used: 1},
	}
	got := make([]quota.GrantOp, len(ops))
	for i, op := range ops {
		got[i] = quota.GrantOp{ID: op.ID, GrantID: op.GrantID, Requested: op.Requested, Used: op.Used}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	if charging.StepID(ref, 10, 4) == charging.StepID(ref, 11, 4) || charging.StepID(ref, 10, 4) == charging.StepID("other", 10, 4) {
		t.Error("step ids collide")
	}
}

// Many sessions stepping at once keep the pool's invariant, and every
// session's answer is its own.
func TestConcurrentSessions(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			sub := []string{"imsi-" + childIMSI, "msisdn-821012345678", "msisdn-821022223333"}[i%3]
			ref, _, err := e.svc.Create(context.Background(), request(sub, 0, ask(10, 2*mib, -1)))
			if err != nil {
				t.Error(err)
				return
			}
			for seq := uint32(1); seq <= 5; seq++ {
				resp, err := e.svc.Update(context.Background(), ref, request(sub, seq, ask(10, 2*mib, 1*mib)))
				if err != nil || resp.InvocationSequenceNumber != seq {
					t.Errorf("update %d: %v", seq, err)
					return
				}
				if err := e.fake.Check(); err != nil {
					t.Error(err)
				}
			}
			if err := e.svc.Release(context.Background(), ref, request(sub, 6, report(10, 1*mib))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if _, used, reserved := e.fake.Pool(family); used != 6*6*mib || reserved != 0 {
		t.Errorf("used %d reserved %d", used, reserved)
	}
}

// The answers as the wire carries them, against golden files checked
// against the schema (TestGoldenFilesMatchTheSchema).
func TestGoldenAnswers(t *testing.T) {
	e := newEnv(t, charging.WithRedirect("https://dpcs.example.net/app/"))
	e.clock.Add(-e.clock.Now().Sub(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)))
	ref, resp, err := e.svc.Create(e.ctx, readRequest(t, "request-create.json", charging.OpCreate))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "response-create.json", resp)
	e.clock.Add(5 * time.Minute)
	if resp, err = e.svc.Update(e.ctx, ref, readRequest(t, "request-update-threshold.json", charging.OpUpdate)); err != nil {
		t.Fatal(err)
	}
	golden(t, "response-update-threshold.json", resp)
	e.clock.Add(time.Minute)
	e.fake.Block(child, policy.BlockedAccess)
	if resp, err = e.svc.Update(e.ctx, ref, readRequest(t, "request-update-reauthorized.json", charging.OpUpdate)); err != nil {
		t.Fatal(err)
	}
	golden(t, "response-update-blocked.json", resp)
	if err := e.svc.Release(e.ctx, ref, readRequest(t, "request-release.json", charging.OpRelease)); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.svc.Create(e.ctx, request("imsi-450059999999999", 0))
	golden(t, "problem-user-unknown.json", problem(t, err).Details())
	_, err = charging.DecodeRequest([]byte(`{"nfConsumerIdentification":{"nodeFunctionality":"SMF"},"invocationTimeStamp":"2026-11-27T10:00:00Z",
		"invocationSequenceNumber":1,"multipleUnitUsage":[{"ratingGroup":10,"requestedUnit":{"totalVolume":-5}}]}`), charging.OpUpdate)
	golden(t, "problem-bad-volume.json", problem(t, err).Details())
}

// Two processes answering the same invocation at once (an SMF's retry
// reaching another instance) give the same answer and charge once.
func TestTwoProcessesAnswerOneInvocation(t *testing.T) {
	e := newEnv(t)
	other := e.service(e.fake, e.st.S)
	ref, _, err := e.svc.Create(e.ctx, request("imsi-"+childIMSI, 0, ask(10, 4*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint32(1); seq <= 8; seq++ {
		req := request("imsi-"+childIMSI, seq, ask(10, 4*mib, 1*mib))
		var answers [4]*charging.ChargingDataResponse
		var errs [4]error
		var wg sync.WaitGroup
		for i := range answers {
			svc := e.svc
			if i%2 == 1 {
				svc = other
			}
			wg.Go(func() { answers[i], errs[i] = svc.Update(context.Background(), ref, req) })
		}
		wg.Wait()
		for i := range answers {
			if errs[i] != nil {
				t.Fatalf("invocation %d, caller %d: %v", seq, i, errs[i])
			}
			if !cmp.Equal(answers[0], answers[i]) {
				t.Errorf("invocation %d: callers answered differently: %+v, %+v", seq, answers[0], answers[i])
			}
		}
		if _, used, _ := e.fake.Pool(family); used != int64(seq)*mib {
			t.Fatalf("after invocation %d: used %d", seq, used)
		}
	}
}

// countingSessions counts the statements the service sends SQL.
type countingSessions struct {
	charging.Sessions
	mu      sync.Mutex
	calls   map[string]int
	biggest int // the most steps one transaction recorded
}

func (c *countingSessions) count(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[name]++
}

func (c *countingSessions) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = map[string]int{}
	return out
}

func (c *countingSessions) OpenChargingSession(ctx context.Context, s store.ChargingSession) (store.ChargingSession, bool, error) {
	c.count("open")
	return c.Sessions.OpenChargingSession(ctx, s)
}

func (c *countingSessions) ChargingSession(ctx context.Context, ref string) (store.ChargingSession, error) {
	c.count("read")
	return c.Sessions.ChargingSession(ctx, ref)
}

func (c *countingSessions) SetChargingGrants(ctx context.Context, ref string, seq int64, g []store.ChargingGrant) (bool, error) {
	c.count("plan")
	return c.Sessions.SetChargingGrants(ctx, ref, seq, g)
}

func (c *countingSessions) RecordChargingSteps(ctx context.Context, steps []store.ChargingStepOn) ([]bool, error) {
	for range steps {
		c.count("record")
	}
	c.mu.Lock()
	c.biggest = max(c.biggest, len(steps))
	c.mu.Unlock()
	return c.Sessions.RecordChargingSteps(ctx, steps)
}

// A session's steps cost one SQL statement each in the process that keeps
// it (doc/benchmarks.md, "The grant path over Nchf"): a create inserts and
// records, an update and a release only record; a rating group new to the
// session is planned first. Another process (or a restart: an empty cache)
// reads the session once.
func TestAStepIsOneStatement(t *testing.T) {
	e := newEnv(t)
	cs := &countingSessions{Sessions: e.st.S, calls: map[string]int{}}
	svc := e.service(e.fake, cs)
	sub := "imsi-" + childIMSI
	ref, _, err := svc.Create(e.ctx, request(sub, 0, ask(10, 4*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.reset(); !cmp.Equal(got, map[string]int{"open": 1, "record": 1}) {
		t.Errorf("a create: %v", got)
	}
	for seq := uint32(1); seq <= 5; seq++ {
		if _, err := svc.Update(e.ctx, ref, request(sub, seq, ask(10, 4*mib, 1*mib))); err != nil {
			t.Fatal(err)
		}
	}
	if got := cs.reset(); !cmp.Equal(got, map[string]int{"record": 5}) {
		t.Errorf("five updates: %v", got)
	}
	// A retry is answered from memory.
	if _, err := svc.Update(e.ctx, ref, request(sub, 5, ask(10, 4*mib, 1*mib))); err != nil {
		t.Fatal(err)
	}
	if got := cs.reset(); len(got) != 0 {
		t.Errorf("a retry: %v", got)
	}
	if _, err := svc.Update(e.ctx, ref, request(sub, 6, ask(10, 4*mib, 1*mib), ask(20, 1*mib, -1))); err != nil {
		t.Fatal(err)
	}
	if got := cs.reset(); !cmp.Equal(got, map[string]int{"plan": 1, "record": 1}) {
		t.Errorf("an update with a new rating group: %v", got)
	}
	// Another process (a restart) reads the session once, then keeps it.
	other := e.service(e.fake, cs)
	for seq := uint32(7); seq <= 8; seq++ {
		if _, err := other.Update(e.ctx, ref, request(sub, seq, ask(10, 4*mib, 1*mib))); err != nil {
			t.Fatal(err)
		}
	}
	if got := cs.reset(); !cmp.Equal(got, map[string]int{"read": 1, "record": 2}) {
		t.Errorf("two updates in another process: %v", got)
	}
	if err := other.Release(e.ctx, ref, request(sub, 9, report(10, 1*mib))); err != nil {
		t.Fatal(err)
	}
	if got := cs.reset(); !cmp.Equal(got, map[string]int{"record": 1}) {
		t.Errorf("a release: %v", got)
	}
	if _, used, reserved := e.fake.Pool(family); used != 9*mib || reserved != 0 {
		t.Errorf("used %d, reserved %d; want 9 MiB and 0", used, reserved)
	}
}

// A session kept in one process's memory moves on in another (an SMF's
// steps reach two processes): the step finds SQL ahead and is taken on
// SQL's session, charged once; a step on a session another process closed
// is refused and what it reserved is returned at once (no sweep would:
// the session is closed).
func TestKeptSessionMovedOnElsewhere(t *testing.T) {
	e := newEnv(t)
	other := e.service(e.fake, e.st.S)
	sub := "imsi-" + childIMSI
	ref, _, err := e.svc.Create(e.ctx, request(sub, 0, ask(10, 4*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Update(e.ctx, ref, request(sub, 1, ask(10, 4*mib, 1*mib))); err != nil {
		t.Fatal(err)
	}
	resp, err := e.svc.Update(e.ctx, ref, request(sub, 2, ask(10, 4*mib, 1*mib)))
	if err != nil {
		t.Fatalf("an update after another process's: %v", err)
	}
	if g := granted(unit(t, resp, 10)); g != 4*mib {
		t.Errorf("granted %d", g)
	}
	if _, used, reserved := e.fake.Pool(family); used != 2*mib || reserved != 4*mib {
		t.Fatalf("used %d, reserved %d; want 2 and 4 MiB", used, reserved)
	}
	if err := other.Release(e.ctx, ref, request(sub, 3, report(10, 1*mib))); err != nil {
		t.Fatalf("a release in the other process: %v", err)
	}
	_, err = e.svc.Update(e.ctx, ref, request(sub, 4, ask(10, 4*mib, 0)))
	wantProblem(t, err, http.StatusNotFound, charging.CauseResourceContextNotFound, "")
	if _, used, reserved := e.fake.Pool(family); used != 3*mib || reserved != 0 || e.fake.Outstanding() != 0 {
		t.Errorf("after a step on a closed session: used %d, reserved %d, %d grants open; want 3 MiB, 0, 0",
			used, reserved, e.fake.Outstanding())
	}
}

// Steps of different sessions answered at the same moment share one SQL
// transaction (one commit), each still recorded only where its session
// was: sessions updated at once until a transaction recorded more than
// one step, every update charged once.
func TestStepsShareATransaction(t *testing.T) {
	e := newEnv(t)
	cs := &countingSessions{Sessions: e.st.S, calls: map[string]int{}}
	svc := e.service(e.fake, cs)
	subs := []string{"imsi-" + childIMSI, "msisdn-01012345678", "msisdn-821022223333"}
	var refs []string
	for i := range 12 {
		ref, _, err := svc.Create(e.ctx, request(subs[i%3], 0, ask(10, 1024, -1)))
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	updates := 0
	deadline := time.Now().Add(30 * time.Second)
	for seq := uint32(1); ; seq++ {
		var wg sync.WaitGroup
		for i, ref := range refs {
			wg.Go(func() {
				if _, err := svc.Update(e.ctx, ref, request(subs[i%3], seq, ask(10, 1024, 1))); err != nil {
					t.Errorf("update %d of %s: %v", seq, ref, err)
				}
			})
		}
		wg.Wait()
		updates += len(refs)
		cs.mu.Lock()
		biggest := cs.biggest
		cs.mu.Unlock()
		if t.Failed() || biggest > 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d updates of %d sessions at once, each recorded in a transaction of its own", updates, len(refs))
		}
	}
	if _, used, _ := e.fake.Pool(family); used != int64(updates) {
		t.Errorf("used %d after %d updates of 1 byte", used, updates)
	}
}

// onUPF is u for the UPF named upf (uPFID).
func onUPF(u charging.MultipleUnitUsage, upf string) charging.MultipleUnitUsage {
	u.UPFID = upf
	return u
}

// unitOn is the answer's part about rg on the UPF named upf.
func unitOn(t *testing.T, resp *charging.ChargingDataResponse, rg uint32, upf string) charging.MultipleUnitInformation {
	t.Helper()
	for _, u := range resp.MultipleUnitInformation {
		if u.RatingGroup == rg && u.UPFID == upf {
			return u
		}
	}
	t.Fatalf("no answer for rating group %d on UPF %q in %+v", rg, upf, resp.MultipleUnitInformation)
	return charging.MultipleUnitInformation{}
}

// Quota managed per UPF (TS 32.291 uPFID): each answer names the UPF its
// request named, so an SMF finds the rules to update; one rating group on
// two UPFs holds two grants, each reported, charged and returned on its
// own, and a release (or the sweep) returns both.
func TestQuotaPerUPF(t *testing.T) {
	e := newEnv(t, charging.WithValidity(10*time.Minute), charging.WithQuotaHoldingTime(time.Minute))
	sub := "imsi-" + childIMSI
	ref, resp, err := e.svc.Create(e.ctx, request(sub, 0, onUPF(ask(10, 4*mib, -1), "upf-a"), onUPF(ask(10, 6*mib, -1), "upf-b"),
		ask(20, 1*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	if g := granted(unitOn(t, resp, 10, "upf-a")); g != 4*mib {
		t.Errorf("upf-a granted %d", g)
	}
	if g := granted(unitOn(t, resp, 10, "upf-b")); g != 6*mib {
		t.Errorf("upf-b granted %d", g)
	}
	if g := granted(unitOn(t, resp, 20, "")); g != 1*mib {
		t.Errorf("rating group 20 (no UPF) granted %d", g)
	}
	if r := e.fake.Reserved(charging.GrantID(ref, 20)); r != 1*mib {
		t.Errorf("rating group 20 without a UPF keeps its grant id: reserved %d", r)
	}
	if _, _, reserved := e.fake.Pool(family); reserved != 11*mib {
		t.Errorf("reserved %d, want 11 MiB", reserved)
	}
	// upf-b reports 6 MiB used and asks again; upf-a's grant is untouched.
	resp, err = e.svc.Update(e.ctx, ref, request(sub, 1, onUPF(ask(10, 2*mib, 6*mib), "upf-b")))
	if err != nil {
		t.Fatal(err)
	}
	if u := unitOn(t, resp, 10, "upf-b"); granted(u) != 2*mib || len(resp.MultipleUnitInformation) != 1 {
		t.Errorf("update answer = %+v", resp.MultipleUnitInformation)
	}
	if _, used, reserved := e.fake.Pool(family); used != 6*mib || reserved != 7*mib {
		t.Errorf("after the update: used %d reserved %d, want 6 and 7 MiB", used, reserved)
	}
	// The same rating group and UPF twice is still refused.
	_, err = e.svc.Update(e.ctx, ref, request(sub, 2, onUPF(ask(10, 1, -1), "upf-a"), onUPF(ask(10, 1, -1), "upf-a")))
	wantProblem(t, err, http.StatusBadRequest, charging.CauseMandatoryIEIncorrect, "/multipleUnitUsage/1/ratingGroup")
	if err := e.svc.Release(e.ctx, ref, request(sub, 2, onUPF(report(10, 1*mib), "upf-a"))); err != nil {
		t.Fatal(err)
	}
	if _, used, reserved := e.fake.Pool(family); used != 7*mib || reserved != 0 || e.fake.Outstanding() != 0 {
		t.Errorf("after the release: used %d reserved %d, want 7 MiB and nothing held", used, reserved)
	}
	// The sweep returns each UPF's grant of a lost session.
	lost, _, err := e.svc.Create(e.ctx, request(sub, 0, onUPF(ask(10, 1*mib, -1), "upf-a"), onUPF(ask(10, 1*mib, -1), "upf-b")))
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Add(12 * time.Minute)
	if info, err := e.svc.Sweep(e.ctx); err != nil || info.Closed != 1 {
		t.Fatalf("sweep: %+v, %v", info, err)
	}
	if _, _, reserved := e.fake.Pool(family); reserved != 0 || e.fake.Outstanding() != 0 {
		t.Errorf("after the sweep of %s: %d bytes reserved", lost, reserved)
	}
	if err := e.fake.Check(); err != nil {
		t.Error(err)
	}
}

// A report without uPFID on a rating group the session holds on one UPF
// only is that grant's: an SMF that named the UPF when it asked and not
// after keeps one reservation, and the answer names the UPF.
func TestReportWithoutUPFIsTheOnlyUPFs(t *testing.T) {
	e := newEnv(t)
	sub := "imsi-" + childIMSI
	ref, _, err := e.svc.Create(e.ctx, request(sub, 0, onUPF(ask(10, 4*mib, -1), "upf-a")))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.svc.Update(e.ctx, ref, request(sub, 1, ask(10, 2*mib, 3*mib)))
	if err != nil {
		t.Fatal(err)
	}
	if g := granted(unitOn(t, resp, 10, "upf-a")); g != 2*mib {
		t.Errorf("granted %d", g)
	}
	if r := e.fake.Reserved(charging.GrantIDOn(ref, 10, "upf-a")); r != 2*mib {
		t.Errorf("upf-a's grant holds %d", r)
	}
	if _, used, reserved := e.fake.Pool(family); used != 3*mib || reserved != 2*mib {
		t.Errorf("used %d reserved %d, want 3 and 2 MiB: one reservation", used, reserved)
	}
}

// A step crowded out (nothing granted, not final: the engine keeps its
// grant open for the next step) on a session another process closed
// meanwhile is undone too: no grant is left open that no session holds.
func TestCrowdedStepOnAClosedSessionIsUndone(t *testing.T) {
	e := newEnv(t)
	other := e.service(e.fake, e.st.S)
	sub := "imsi-" + childIMSI
	ref, _, err := e.svc.Create(e.ctx, request(sub, 0, ask(10, 4*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Release(e.ctx, ref, request(sub, 1, report(10, 1*mib))); err != nil {
		t.Fatal(err)
	}
	e.fake.CrowdNext(1)
	_, err = e.svc.Update(e.ctx, ref, request(sub, 2, ask(10, 4*mib, 0)))
	wantProblem(t, err, http.StatusNotFound, charging.CauseResourceContextNotFound, "")
	if n := e.fake.Outstanding(); n != 0 {
		t.Errorf("%d grants open after a crowded step on a closed session; want 0", n)
	}
	if err := e.fake.Check(); err != nil {
		t.Error(err)
	}
}

// listedSessions runs then once, after the sweep read the expired
// sessions and before it closes them.
type listedSessions struct {
	charging.Sessions
	then func()
}

func (l *listedSessions) ExpiredChargingSessions(ctx context.Context, now time.Time, limit int) ([]store.ChargingSession, error) {
	list, err := l.Sessions.ExpiredChargingSessions(ctx, now, limit)
	if f := l.then; f != nil {
		l.then = nil
		f()
	}
	return list, err
}

// A step that added a rating group to an expired session after the sweep
// read it (and whose answer could not be recorded) leaves a reservation
// the sweep returns too: it closes the session as SQL holds it once
// CLOSING, not as it read it.
func TestSweepReleasesGrantsAddedAfterItsRead(t *testing.T) {
	e := newEnv(t, charging.WithValidity(10*time.Minute), charging.WithQuotaHoldingTime(time.Minute))
	fs := &failingSessions{Sessions: e.st.S}
	ls := &listedSessions{Sessions: fs}
	svc := e.service(e.fake, ls, charging.WithValidity(10*time.Minute), charging.WithQuotaHoldingTime(time.Minute))
	sub := "imsi-" + childIMSI
	ref, _, err := svc.Create(e.ctx, request(sub, 0, ask(10, 4*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Add(12 * time.Minute)
	ls.then = func() {
		fs.mu.Lock()
		fs.fail = true
		fs.mu.Unlock()
		_, err := svc.Update(e.ctx, ref, request(sub, 1, ask(10, 4*mib, 1*mib), ask(20, 2*mib, -1)))
		wantProblem(t, err, http.StatusInternalServerError, charging.CauseSystemFailure, "")
		fs.mu.Lock()
		fs.fail = false
		fs.mu.Unlock()
	}
	if info, err := svc.Sweep(e.ctx); err != nil || info.Closed != 1 {
		t.Fatalf("sweep: %+v, %v", info, err)
	}
	if _, _, reserved := e.fake.Pool(family); reserved != 0 || e.fake.Outstanding() != 0 {
		t.Errorf("after the sweep: %d bytes reserved by %d grants; want none", reserved, e.fake.Outstanding())
	}
}

// beforeCharge runs then once before the next Charge.
type beforeCharge struct {
	charging.Charger
	then func()
}

func (b *beforeCharge) Charge(ctx context.Context, ops []quota.GrantOp) ([]quota.GrantResult, error) {
	if f := b.then; f != nil {
		b.then = nil
		f()
	}
	return b.Charger.Charge(ctx, ops)
}

// A step whose session another process's sweep closed after this one read
// it, and whose record then fails outright (not "moved on": SQL's answer
// lost), is undone once SQL says the session is closed: its reservation is
// nobody's.
func TestFailedRecordOnASweptSessionIsUndone(t *testing.T) {
	e := newEnv(t, charging.WithValidity(10*time.Minute), charging.WithQuotaHoldingTime(time.Minute))
	fs := &failingSessions{Sessions: e.st.S}
	bc := &beforeCharge{Charger: e.fake}
	svc := e.service(bc, fs, charging.WithValidity(10*time.Minute), charging.WithQuotaHoldingTime(time.Minute))
	other := e.service(e.fake, e.st.S, charging.WithValidity(10*time.Minute), charging.WithQuotaHoldingTime(time.Minute))
	sub := "imsi-" + childIMSI
	ref, _, err := svc.Create(e.ctx, request(sub, 0, ask(10, 4*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Add(12 * time.Minute)
	bc.then = func() {
		if info, err := other.Sweep(e.ctx); err != nil || info.Closed != 1 {
			t.Errorf("the other process's sweep: %+v, %v", info, err)
		}
		fs.mu.Lock()
		fs.fail = true
		fs.mu.Unlock()
	}
	_, err = svc.Update(e.ctx, ref, request(sub, 1, ask(10, 4*mib, 1*mib)))
	wantProblem(t, err, http.StatusInternalServerError, charging.CauseSystemFailure, "")
	if _, _, reserved := e.fake.Pool(family); reserved != 0 || e.fake.Outstanding() != 0 {
		t.Errorf("%d bytes reserved by %d grants of a closed session; want none", reserved, e.fake.Outstanding())
	}
}

// A grant crowded out by the family's other grants (the engine: nothing,
// or less than asked, and not final: asked again it gets at least its
// fair share once the others shrink) is not told to end: no
// finalUnitIndication, and a validityTime of CrowdedRetry, at which the
// SMF asks again. A small grant is final only when the engine says so.
func TestCrowdedGrantsAskAgain(t *testing.T) {
	e := newEnv(t)
	e.fake.CrowdNext(1)
	ref, resp, err := e.svc.Create(e.ctx, request("imsi-"+childIMSI, 0, ask(10, 10*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	u := unit(t, resp, 10)
	if granted(u) != 0 || u.FinalUnitIndication != nil || u.ValidityTime == nil ||
		*u.ValidityTime != int64(charging.CrowdedRetry/time.Second) {
		t.Errorf("crowded out: %+v (finalUnitIndication %+v)", u, u.FinalUnitIndication)
	}
	e.fake.CrowdNext(0)
	resp, err = e.svc.Update(e.ctx, ref, request("imsi-"+childIMSI, 1, ask(10, 10*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	if u := unit(t, resp, 10); granted(u) != 10*mib || u.ResultCode != charging.ResultSuccess {
		t.Errorf("asked again: %+v", u)
	}
}

// validityTime never reaches past the boundary the engine named: whole
// seconds rounded down (the SMF asks again a little early, never late),
// at least one.
func TestValidityTimeEndsByTheBoundary(t *testing.T) {
	e := newEnv(t)
	e.clock.Add(400 * time.Millisecond)
	boundary := e.clock.Now().Truncate(time.Second).Add(3 * time.Second) // 2.6 s away
	e.fake.ValidUntil(boundary)
	_, resp, err := e.svc.Create(e.ctx, request("imsi-"+childIMSI, 0, ask(10, 1*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	if v := *unit(t, resp, 10).ValidityTime; e.clock.Now().Add(time.Duration(v)*time.Second).After(boundary) || v != 2 {
		t.Errorf("validityTime %d s from %v: past the boundary %v, want 2", v, e.clock.Now(), boundary)
	}
	e.fake.ValidUntil(e.clock.Now().Add(300 * time.Millisecond))
	_, resp, err = e.svc.Create(e.ctx, request("msisdn-821012345678", 0, ask(10, 1*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	if v := *unit(t, resp, 10).ValidityTime; v != 1 {
		t.Errorf("less than a second left: validityTime %d, want 1", v)
	}
}

// A session whose subscriber no longer names its member — the IMSI it was
// opened with taken off the member, or given to another — is closed once
// the change is reported (Reidentified): its grants returned, ABORT_CHARGING
// sent, its next update refused. A session named by another identity that
// still names the member (the phone, or the served GPSI when the IMSI
// named nobody) stays open.
func TestIMSIChangeClosesSessions(t *testing.T) {
	e := newEnv(t, charging.WithNotifyNetworks(true))
	node := newSMF(t, false)
	byIMSI := request("imsi-"+childIMSI, 0, ask(10, 2*mib, -1))
	byIMSI.NotifyURI = node.URL + "/n/imsi"
	imsiRef, _, err := e.svc.Create(e.ctx, byIMSI)
	if err != nil {
		t.Fatal(err)
	}
	// Dad's session, named by an IMSI nobody has and his phone as the GPSI.
	byGPSI := request("imsi-450059999999999", 0, ask(10, 2*mib, -1))
	byGPSI.PDUSessionChargingInformation = &charging.PDUSessionChargingInformation{
		UserInformation: &charging.UserInformation{ServedGPSI: "msisdn-821012345678"}}
	gpsiRef, _, err := e.svc.Create(e.ctx, byGPSI)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.S.SetMemberIMSI(e.ctx, family, child, "", store.System); err != nil {
		t.Fatal(err)
	}
	e.svc.Reidentified(family, child, dad)
	if n := node.wait(t, 10*time.Second); n.path != "/n/imsi" || !strings.Contains(string(n.body), charging.NotificationAbortCharging) {
		t.Errorf("notified %s %s, want ABORT_CHARGING of the child's session", n.path, n.body)
	}
	if sess, err := e.st.S.ChargingSession(e.ctx, imsiRef); err != nil || sess.State != store.ChargingClosed {
		t.Errorf("the child's session: %+v, %v; want CLOSED", sess, err)
	}
	if r := e.fake.Reserved(charging.GrantID(imsiRef, 10)); r != 0 {
		t.Errorf("the closed session still holds %d", r)
	}
	if sess, err := e.st.S.ChargingSession(e.ctx, gpsiRef); err != nil || sess.State != store.ChargingOpen ||
		e.fake.Reserved(charging.GrantID(gpsiRef, 10)) != 2*mib {
		t.Errorf("dad's session (named by his phone): %+v, %v; want it open, holding 2 MiB", sess, err)
	}
	_, err = e.svc.Update(e.ctx, imsiRef, request("imsi-"+childIMSI, 1, ask(10, 1*mib, 1*mib)))
	wantProblem(t, err, http.StatusNotFound, charging.CauseResourceContextNotFound, "")
}
