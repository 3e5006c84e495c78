package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/api"
	"github.com/dabom/dpcs/service/api/backoffice"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/simulate"
)

// ownerPassword is the password the stories give a family's first owner,
// who then logs in like a parent with the app.
const ownerPassword = "e2e-owner-password"

// pipeline is a simulate.Target that plays a scenario against a whole
// running system, one step at a time:
//
//   - Provision creates the family through the HTTP API as the back-office
//     admin (POST /admin/families, POST …/members, PATCH …/policies), logs the
//     first owner in and subscribes to the family's SSE stream.
//   - Usage publishes the event into Kafka (usage-events) with the
//     simulator's publisher and waits until the processor judged it and the
//     notifier stored what it caused. The decision and the pool's remaining
//     bytes are the processor's usage-persist record, the crossed thresholds
//     its THRESHOLD_ALERT records, Duplicate the processor's replay counter
//     on /metrics, and Notifications what reached the family's inbox (GET
//     …/notifications) because of the step.
//   - Policy is the owner changing the member's constraints through the API
//     (PATCH …/policies, which goes to SQL and the outbox, and from the relay
//     through policy-updated to the processor). The reported status is the
//     answer's standing, checked against the dashboard.
//
// verify then checks what the story left behind: the SQL history, Redis,
// the inbox, the SSE stream and the API's reports.
type pipeline struct {
	s       *stack
	setup   simulate.Setup
	owner   string // the first owner's access token (the admin's when there is no owner)
	ownerID int64
	sse     *sseStream
	lastID  int64 // the newest inbox row seen
	sent    map[string]int
	order   []string                    // distinct usage event ids, first-sent order
	first   map[string]simulate.Outcome // the first judgement of each usage event
	events  map[string]simulate.Event
	blocks  int // policy changes that left a member blocked (each announced)
	trace   []string
	problem []error // differences beyond a step's Expect
}

var _ simulate.Target = (*pipeline)(nil)

func newPipeline(s *stack) *pipeline {
	return &pipeline{s: s, sent: map[string]int{}, first: map[string]simulate.Outcome{}, events: map[string]simulate.Event{}}
}

func (p *pipeline) fid() int64 { return p.setup.FamilyID }

func (p *pipeline) fail(format string, args ...any) {
	p.problem = append(p.problem, fmt.Errorf(format, args...))
}

// close ends the SSE subscription (before the system stops: an open stream
// would hold its HTTP server's shutdown).
func (p *pipeline) close() {
	if p.sse != nil {
		p.sse.Close()
		p.sse = nil
	}
}

func (p *pipeline) Provision(ctx context.Context, setup simulate.Setup) error {
	p.setup, p.owner = setup, p.s.admin
	cl, admin, fid := p.s.api, p.s.admin, setup.FamilyID
	fam := map[string]any{"id": fid, "name": fmt.Sprintf("e2e family %d", fid), "planBytes": setup.PoolBytes}
	if setup.Thresholds != nil {
		fam["thresholds"] = []int(setup.Thresholds)
	}
	if err := cl.call(ctx, http.MethodPost, "/admin/families", admin, fam, nil, http.StatusCreated); err != nil {
		return err
	}
	var owner int64
	for _, m := range setup.Members {
		body := map[string]any{"customerId": m.CustomerID, "name": m.Name, "role": string(m.Role)}
		if m.Role == policy.RoleOwner && owner == 0 {
			owner, body["password"] = m.CustomerID, ownerPassword
		}
		if err := cl.call(ctx, http.MethodPost, fmt.Sprintf("/families/%d/members", fid), admin, body, nil, http.StatusCreated); err != nil {
			return err
		}
	}
	if owner != 0 {
		tok, err := cl.login(ctx, owner, ownerPassword)
		if err != nil {
			return err
		}
		p.owner, p.ownerID = tok, owner
	}
	// Subscribe before anything can be announced.
	sse, err := openSSE(ctx, cl, p.owner, fid)
	if err != nil {
		return err
	}
	p.sse = sse
	for _, m := range setup.Members {
		if len(m.Constraints) > 0 {
			if _, err := p.changePolicy(ctx, admin, m.CustomerID, m.Constraints); err != nil {
				return err
			}
		}
	}
	// Start the story from a quiet system: whatever provisioning caused (a
	// member blocked by a night window right away) is not a step's doing.
	if err := p.s.settle(ctx, false); err != nil {
		return err
	}
	_, err = p.notifications(ctx, 0)
	return err
}

// changePolicy replaces a member's constraints through the API as the
// caller of token and waits until the relay published the change.
func (p *pipeline) changePolicy(ctx context.Context, token string, cid int64, c map[string]string) (api.PolicyView, error) {
	if c == nil {
		c = map[string]string{}
	}
	var v api.PolicyView
	err := p.s.api.call(ctx, http.MethodPatch, fmt.Sprintf("/families/%d/members/%d/policies", p.fid(), cid), token,
		map[string]any{"replace": c}, &v, http.StatusOK)
	if err != nil {
		return v, err
	}
	if v.Standing == nil {
		return v, fmt.Errorf("PATCH policies of %d: no standing in the answer %+v", cid, v)
	}
	if v.Standing.Status == "BLOCKED" {
		p.blocks++
	}
	return v, p.s.watch.await(ctx, v.EventID)
}

func (p *pipeline) Usage(ctx context.Context, ev simulate.Event) (simulate.Outcome, error) {
	if p.sent[ev.EventID] > 0 {
		p.s.replays.Lock()
		defer p.s.replays.Unlock()
	} else {
		p.s.replays.RLock()
		defer p.s.replays.RUnlock()
	}
	before, err := p.s.duplicates(ctx)
	if err != nil {
		return simulate.Outcome{}, err
	}
	if err := p.deliver(ctx, ev); err != nil {
		return simulate.Outcome{}, err
	}
	if err := p.s.settle(ctx, false); err != nil {
		return simulate.Outcome{}, err
	}
	o, err := p.judged(ev.EventID)
	if err != nil {
		return o, err
	}
	after, err := p.s.duplicates(ctx)
	if err != nil {
		return o, err
	}
	if after-before > 1 {
		p.fail("event %s: %d replays counted for one delivery", ev.EventID, after-before)
	}
	o.Duplicate = after > before
	if o.Notifications, err = p.notifications(ctx, ev.Payload.CustomerID); err != nil {
		return o, err
	}
	p.trace = append(p.trace, fmt.Sprintf("%s rem %s crossed %v duplicate %v notified %v",
		o.Decision, mib(o.Remaining), o.Crossed, o.Duplicate, o.Notifications))
	return o, nil
}

// deliver publishes events (a fresh record each) and counts the deliveries.
func (p *pipeline) deliver(ctx context.Context, evs ...simulate.Event) error {
	for _, ev := range evs {
		if p.sent[ev.EventID] == 0 {
			p.order = append(p.order, ev.EventID)
			p.events[ev.EventID] = ev
		}
		p.sent[ev.EventID]++
	}
	return p.s.publish(ctx, evs...)
}

// judged reads the processor's verdict on a usage event from what it
// emitted, and checks that every delivery re-emitted the same records.
func (p *pipeline) judged(id string) (simulate.Outcome, error) {
	w := p.s.watch
	recs := w.persisted(id)
	if len(recs) == 0 {
		return simulate.Outcome{}, fmt.Errorf("event %s: no decision emitted (dead letters: %v)", id, w.deadFor(id))
	}
	n := p.sent[id]
	for _, out := range outputsOf(id) {
		rs := w.records(out)
		if len(rs) > 0 && len(rs) != n {
			p.fail("event %s delivered %d times: record %s emitted %d times (every delivery re-emits its records)", id, n, out, len(rs))
		}
		for _, r := range rs[min(1, len(rs)):] {
			if !bytes.Equal(r.Value, rs[0].Value) || !bytes.Equal(r.Key, rs[0].Key) {
				p.fail("event %s: record %s re-emitted differently:\n%s\n%s", id, out, rs[0].Value, r.Value)
			}
		}
	}
	e, err := envelope.DecodeAs[envelope.UsagePersistPayload](recs[0].Value)
	if err != nil {
		return simulate.Outcome{}, err
	}
	crossed, emitted := w.crossed(id)
	for i, k := range emitted {
		if k != n {
			p.fail("event %s delivered %d times: THRESHOLD_ALERT %d%% emitted %d times", id, n, crossed[i], k)
		}
	}
	o := simulate.Outcome{Decision: policy.Decision(e.Payload.ProcessResult), Remaining: e.Payload.RemainingAfter, Crossed: crossed}
	if _, ok := p.first[id]; !ok {
		p.first[id] = o
	}
	return o, nil
}

// notifications returns the kinds of what reached the family's inbox since
// the last call (never nil: the step's notifications are then checked).
// Notifications about a member must be about cid, the step's member.
func (p *pipeline) notifications(ctx context.Context, cid int64) ([]envelope.SubType, error) {
	items, err := p.s.api.inbox(ctx, p.owner, p.fid(), p.lastID)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(items, func(a, b notify.Notification) int { return cmp.Compare(a.ID, b.ID) })
	kinds := []envelope.SubType{}
	for _, n := range items {
		kinds = append(kinds, n.Kind)
		p.lastID = max(p.lastID, n.ID)
		if cid != 0 && n.MemberID != 0 && n.MemberID != cid {
			p.fail("%s %s is about member %d, the step was about member %d", n.Kind, n.EventID, n.MemberID, cid)
		}
	}
	return kinds, nil
}

func (p *pipeline) Policy(ctx context.Context, ev envelope.Envelope[envelope.PolicyUpdatedPayload]) (simulate.Outcome, error) {
	cid := ev.Payload.TargetCustomerID
	v, err := p.changePolicy(ctx, p.owner, cid, ev.Payload.Constraints)
	if err != nil {
		return simulate.Outcome{}, err
	}
	if err := p.s.settle(ctx, false); err != nil {
		return simulate.Outcome{}, err
	}
	o := simulate.Outcome{Decision: policy.Decision(v.Standing.Decision)}
	if want := ev.Payload.Version; v.Version != want {
		p.fail("member %d: policy version %d after the change, the scenario's is %d", cid, v.Version, want)
	}
	// Every policy change is in the audit log, with who made it.
	var audit struct{ Entries []backoffice.AuditView }
	if err := p.s.api.call(ctx, http.MethodGet, fmt.Sprintf("/admin/audit-log?target=member:%d&limit=1", cid), p.s.admin,
		nil, &audit, http.StatusOK); err != nil {
		return o, err
	}
	if len(audit.Entries) == 0 || audit.Entries[0].ActorID != p.ownerID || !strings.HasPrefix(audit.Entries[0].Action, "policy") {
		p.fail("member %d: the audit log's latest entry is %+v, want the policy change by owner %d", cid, audit.Entries, p.ownerID)
	}
	// The status the family sees now, on the dashboard.
	var d api.Dashboard
	if err := p.s.api.call(ctx, http.MethodGet, fmt.Sprintf("/families/%d", p.fid()), p.owner, nil, &d, http.StatusOK); err != nil {
		return o, err
	}
	for _, m := range d.Members {
		if m.CustomerID == cid && m.Decision != v.Standing.Decision {
			p.fail("member %d: the policy change answered %s, the dashboard says %s", cid, v.Standing.Decision, m.Decision)
		}
	}
	if o.Notifications, err = p.notifications(ctx, cid); err != nil {
		return o, err
	}
	p.trace = append(p.trace, fmt.Sprintf("status %s (rule %s, policy v%d) notified %v", o.Decision, v.Standing.Rule, v.Version, o.Notifications))
	return o, nil
}

// verify checks what the story left behind, once the write-behind wrote it:
// one usage_record row per event with the processor's decision, SQL equal
// to Redis, every notification in the inbox once and pushed over SSE once,
// thresholds announced once, and the API reporting the same usage.
func (p *pipeline) verify(ctx context.Context) error {
	if err := p.s.settle(ctx, true); err != nil {
		return err
	}
	for _, id := range p.order { // events sent in a burst were not looked at one by one
		if _, ok := p.first[id]; !ok {
			if _, err := p.judged(id); err != nil {
				return err
			}
		}
	}
	errs := append([]error(nil), p.problem...)
	for _, id := range p.order {
		if dead := p.s.watch.deadFor(id); len(dead) > 0 {
			errs = append(errs, fmt.Errorf("event %s dead-lettered: %v", id, dead))
		}
	}
	fid, sys := p.fid(), p.s.sys
	errs = append(errs, p.verifyHistory(ctx))
	if err := recovery.CheckInvariants(ctx, sys.Engine, sys.DB, []int64{fid}); err != nil {
		errs = append(errs, fmt.Errorf("invariants: %w", err))
	}
	if err := CheckThresholdAlertsOnce(ctx, sys.DB, []int64{fid}); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, p.verifyNotifications(ctx), p.verifyReports(ctx))
	return errors.Join(errs...)
}

// verifyHistory compares usage_record with the processor's decisions.
func (p *pipeline) verifyHistory(ctx context.Context) error {
	rows, err := p.s.sys.DB.QueryContext(ctx, `SELECT event_id, customer_id, bytes_used, process_result, remaining_after
		FROM usage_record WHERE family_id = ?`, p.fid())
	if err != nil {
		return err
	}
	defer rows.Close()
	type row struct {
		cid, bytes int64
		decision   string
		remaining  int64
	}
	got := map[string][]row{}
	for rows.Next() {
		var id string
		var r row
		if err := rows.Scan(&id, &r.cid, &r.bytes, &r.decision, &r.remaining); err != nil {
			return err
		}
		got[id] = append(got[id], r)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var errs []error
	for _, id := range p.order {
		ev, o := p.events[id], p.first[id]
		want := row{ev.Payload.CustomerID, ev.Payload.BytesUsed, string(o.Decision), o.Remaining}
		switch rs := got[id]; {
		case len(rs) == 0:
			errs = append(errs, fmt.Errorf("usage_record: event %s (judged %s) was never persisted", id, o.Decision))
		case len(rs) > 1:
			errs = append(errs, fmt.Errorf("usage_record: event %s persisted %d times", id, len(rs)))
		case rs[0] != want:
			errs = append(errs, fmt.Errorf("usage_record: event %s: persisted member %d %s %s rem %s; judged member %d %s %s rem %s",
				id, rs[0].cid, mib(rs[0].bytes), rs[0].decision, mib(rs[0].remaining), want.cid, mib(want.bytes), want.decision, mib(want.remaining)))
		}
		delete(got, id)
	}
	for id := range got {
		errs = append(errs, fmt.Errorf("usage_record: event %s was never sent", id))
	}
	return errors.Join(errs...)
}

// expectedNotifications counts, by kind, what the story must have put in
// the inbox: per distinct usage event a QUOTA_UPDATED (allowed) or a
// CUSTOMER_BLOCKED, per crossing a THRESHOLD_ALERT, and a CUSTOMER_BLOCKED
// per policy change that blocked a member.
func (p *pipeline) expectedNotifications() (map[envelope.SubType]int, map[int]int) {
	kinds, alerts := map[envelope.SubType]int{}, map[int]int{}
	for _, id := range p.order {
		o := p.first[id]
		if o.Decision == policy.Allowed {
			kinds[envelope.SubQuotaUpdated]++
		} else {
			kinds[envelope.SubCustomerBlocked]++
		}
		for _, pct := range o.Crossed {
			kinds[envelope.SubThresholdAlert]++
			alerts[pct]++
		}
	}
	kinds[envelope.SubCustomerBlocked] += p.blocks
	return kinds, alerts
}

// verifyNotifications checks the inbox (through the API) and the SSE stream.
func (p *pipeline) verifyNotifications(ctx context.Context) error {
	items, err := p.s.api.inbox(ctx, p.owner, p.fid(), 0)
	if err != nil {
		return err
	}
	var errs []error
	kinds, alerts, ids := map[envelope.SubType]int{}, map[int]int{}, map[string]int{}
	for _, n := range items {
		kinds[n.Kind]++
		ids[n.EventID]++
		if n.Kind == envelope.SubThresholdAlert {
			var a envelope.ThresholdAlert
			if err := json.Unmarshal(n.Payload, &a); err != nil {
				errs = append(errs, fmt.Errorf("inbox: alert %s: %w", n.EventID, err))
				continue
			}
			alerts[a.ThresholdPercent]++
		}
	}
	wantKinds, wantAlerts := p.expectedNotifications()
	if !maps.Equal(kinds, dropZero(wantKinds)) {
		errs = append(errs, fmt.Errorf("inbox: notifications by kind %v, want %v", kinds, dropZero(wantKinds)))
	}
	if !maps.Equal(alerts, wantAlerts) {
		errs = append(errs, fmt.Errorf("inbox: threshold alerts by percent %v, want %v (each crossing once)", alerts, wantAlerts))
	}
	for id, n := range ids {
		if n > 1 {
			errs = append(errs, fmt.Errorf("inbox: notification %s stored %d times", id, n))
		}
	}
	if p.sse == nil {
		return errors.Join(errs...)
	}
	// Every stored notification was pushed live, once. The push happens
	// before the notifier commits, but travels on its own connection.
	var got map[string]int
	var sseErr error
	err = Wait{What: fmt.Sprintf("the %d notifications in the inbox to be pushed over SSE", len(ids))}.Until(ctx,
		func(context.Context) (Progress, error) {
			if got, sseErr = p.sse.received(); sseErr != nil {
				return Progress{Done: true}, nil // the stream is broken for good
			}
			var missing []string
			var pushed int64
			for id := range ids {
				if got[id] == 0 {
					missing = append(missing, id)
				}
			}
			for _, n := range got {
				pushed += int64(n)
			}
			slices.Sort(missing)
			return Progress{Done: len(missing) == 0, At: pushed, Seen: fmt.Sprintf("%d pushed; not pushed: %s",
				pushed, strings.Join(missing[:min(len(missing), 10)], ", "))}, nil
		})
	errs = append(errs, err, sseErr)
	for id, n := range got {
		switch {
		case ids[id] == 0:
			errs = append(errs, fmt.Errorf("SSE: pushed %s, which is not in the inbox", id))
		case n > 1:
			errs = append(errs, fmt.Errorf("SSE: notification %s pushed %d times", id, n))
		}
	}
	return errors.Join(errs...)
}

func dropZero[K comparable](m map[K]int) map[K]int {
	out := map[K]int{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// verifyReports reads the family back through the API: the dashboard's
// pool and member usage, and each member's usage report (from the SQL
// history), must add up to what was allowed.
func (p *pipeline) verifyReports(ctx context.Context) error {
	allowed, total := map[int64]int64{}, int64(0)
	for _, id := range p.order {
		if p.first[id].Decision == policy.Allowed {
			ev := p.events[id]
			allowed[ev.Payload.CustomerID] += ev.Payload.BytesUsed
			total += ev.Payload.BytesUsed
		}
	}
	cl, fid := p.s.api, p.fid()
	var d api.Dashboard
	if err := cl.call(ctx, http.MethodGet, fmt.Sprintf("/families/%d", fid), p.owner, nil, &d, http.StatusOK); err != nil {
		return err
	}
	var errs []error
	if d.Pool.UsedBytes != total || d.Pool.TotalBytes-d.Pool.UsedBytes != d.Pool.RemainingBytes {
		errs = append(errs, fmt.Errorf("dashboard: pool used %s remaining %s of %s; allowed %s",
			mib(d.Pool.UsedBytes), mib(d.Pool.RemainingBytes), mib(d.Pool.TotalBytes), mib(total)))
	}
	for _, m := range d.Members {
		if m.MonthlyUsedBytes != allowed[m.CustomerID] {
			errs = append(errs, fmt.Errorf("dashboard: member %d used %s this month; allowed %s",
				m.CustomerID, mib(m.MonthlyUsedBytes), mib(allowed[m.CustomerID])))
		}
	}
	var fu backoffice.FamilyUsageView
	if err := cl.call(ctx, http.MethodGet, fmt.Sprintf("/admin/families/%d/usage", fid), p.s.admin, nil, &fu, http.StatusOK); err != nil {
		return err
	}
	if fu.AllowedBytes != total || fu.Events != int64(len(p.order)) {
		errs = append(errs, fmt.Errorf("admin usage report: %s allowed in %d events; want %s in %d",
			mib(fu.AllowedBytes), fu.Events, mib(total), len(p.order)))
	}
	for _, m := range p.setup.Members {
		var u api.UsageView
		if err := cl.call(ctx, http.MethodGet, fmt.Sprintf("/families/%d/members/%d/usage?period=month", fid, m.CustomerID),
			p.owner, nil, &u, http.StatusOK); err != nil {
			return err
		}
		if u.AllowedBytes != allowed[m.CustomerID] || u.MonthlyUsedBytes != allowed[m.CustomerID] {
			errs = append(errs, fmt.Errorf("usage report of member %d: %s persisted, %s live; allowed %s",
				m.CustomerID, mib(u.AllowedBytes), mib(u.MonthlyUsedBytes), mib(allowed[m.CustomerID])))
		}
	}
	return errors.Join(errs...)
}

// steps renders a scenario's steps with what the system did, for a failing
// story: expected and observed decision, pool, crossings, notifications.
func (p *pipeline) steps(sc simulate.Scenario) string {
	var b strings.Builder
	for i, st := range sc.Steps {
		want := fmt.Sprintf("%s", st.Expect.Decision)
		if st.Expect.Remaining != nil {
			want += " rem " + mib(*st.Expect.Remaining)
		}
		if len(st.Expect.Crossed) > 0 {
			want += fmt.Sprintf(" crossed %v", st.Expect.Crossed)
		}
		if st.Expect.Duplicate {
			want += " duplicate"
		}
		if len(st.Expect.Notify) > 0 {
			want += fmt.Sprintf(" notify %v", st.Expect.Notify)
		}
		got := "(not played)"
		if i < len(p.trace) {
			got = p.trace[i]
		}
		fmt.Fprintf(&b, "  %2d %-8s %-40q want %s\n     %-49s got  %s\n", i, st.Kind, st.Note, want, "", got)
	}
	return b.String()
}

// mib prints a byte count exactly and in MiB.
func mib(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d B (%.3f MiB)", n, float64(n)/(1<<20))
}
