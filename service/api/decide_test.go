package api

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/api/gateway"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/outbox"
)

const testGateway = "gw_test_0123456789abcdef0123456789abcdef"

// genFunc is a GenerationSource from a func.
type genFunc func(ctx context.Context) (string, error)

func (g genFunc) Generation(ctx context.Context) (string, error) { return g(ctx) }

// decideFixture is an API fixture serving POST /decisions on an embedded
// Kafka whose produce requests fail while down is set.
type decideFixture struct {
	*apiFixture
	kafka   *kfake.Cluster
	dec     *judge.Decisions
	down    atomic.Bool
	batches atomic.Int64
	mu      sync.Mutex
	infos   []judge.DecisionBatchInfo
}

func newDecideFixture(t *testing.T, opts ...judge.DecisionsOpt) *decideFixture {
	t.Helper()
	return newDecideFixtureSpool(t, nil, opts...)
}

// newDecideFixtureSpool is newDecideFixture whose decisions spool to
// spool(the fixture's SQL database) when it is not nil.
func newDecideFixtureSpool(t *testing.T, spool func(*sql.DB) judge.Spool, opts ...judge.DecisionsOpt) *decideFixture {
	t.Helper()
	d := &decideFixture{}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(envelope.DefaultPartitions, envelope.Topics()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	d.kafka = c
	// Down: every produce is refused (INVALID_RECORD, which the client does
	// not retry). With a retriable one (NOT_ENOUGH_REPLICAS) the client
	// sent kfake nothing more after the fault was lifted, within 10 s: a
	// kfake/kgo interplay left for later, see the final report.
	testenv.RefuseProduces(c, kerr.InvalidRecord.Code, d.down.Load)
	d.apiFixture = newAPIFixture(t, func(cfg *Config) {
		all := append([]judge.DecisionsOpt{judge.WithClock(cfg.Clock), judge.WithTimeout(time.Second),
			judge.WithDecisionHooks(judge.DecisionHooks{OnBatch: func(b judge.DecisionBatchInfo) {
				d.batches.Add(1)
				d.mu.Lock()
				d.infos = append(d.infos, b)
				d.mu.Unlock()
			}})}, opts...)
		if spool != nil {
			all = append(all, judge.WithSpool(spool(cfg.Store.DB())))
		}
		kopts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
		if os.Getenv("DPCS_TEST_KAFKA_DEBUG") != "" {
			kopts = append(kopts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, nil)))
		}
		d.dec, err = judge.NewDecisions(cfg.State.(*judge.State), kopts, all...)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Decisions, cfg.GatewayTokens = d.dec, []string{"gw_other_0123456789abcdef0123456789ab", testGateway}
	})
	t.Cleanup(func() {
		if err := d.dec.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return d
}

func (d *decideFixture) event(id string, fid, cid, bytes int64) gateway.UsageEvent {
	return gateway.UsageEvent{EventID: id, Timestamp: d.clock(), FamilyID: fid, CustomerID: cid, AppID: "com.youtube.app", BytesUsed: bytes}
}

// decide posts evs with the gateway credential and wants status want.
func (d *decideFixture) decide(want int, evs ...gateway.UsageEvent) []gateway.EventDecision {
	d.t.Helper()
	var out gateway.DecisionList
	if want != http.StatusOK {
		d.problem(http.MethodPost, "/decisions", testGateway, gateway.DecisionAsk{Events: evs}, want, "")
		return nil
	}
	d.call(http.MethodPost, "/decisions", testGateway, gateway.DecisionAsk{Events: evs}, want, &out)
	return out.Decisions
}

// persisted reads usage-persist from the start until every id in ids was
// seen (a deadline ends the wait), and returns how often each was.
func (d *decideFixture) persisted(ids ...string) map[string]int {
	d.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.kafka.ListenAddrs()...), kgo.ConsumeTopics(envelope.TopicUsagePersist))
	if err != nil {
		d.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seen := map[string]int{}
	missing := func() []string {
		var m []string
		for _, id := range ids {
			if seen[id] == 0 {
				m = append(m, id)
			}
		}
		return m
	}
	for len(missing()) > 0 {
		f := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			d.t.Fatalf("usage-persist: waited 10s for the records of %v; saw %v", missing(), seen)
		}
		for _, r := range f.Records() {
			e, err := envelope.DecodeAs[envelope.UsagePersistPayload](r.Value)
			if err != nil {
				d.t.Fatal(err)
			}
			seen[e.Payload.OriginEventID]++
		}
	}
	return seen
}

// TestDecideEndpoint: decisions in order, the same answers for a retry
// (flagged duplicate, charged once), the records in Kafka, bad events 422.
func TestDecideEndpoint(t *testing.T) {
	d := newDecideFixture(t)
	pool := func() int64 {
		st, err := d.engine.Family(context.Background(), famA)
		if err != nil {
			t.Fatal(err)
		}
		return st.Remaining
	}
	start := pool()
	got := d.decide(http.StatusOK, d.event("e1", famA, childA, 3*gib), d.event("e2", famA, ownerA, 6*gib),
		d.event("e3", famA, childA, 2*gib), d.event("e4", famA, 5555, 1))
	want := []gateway.EventDecision{
		{EventID: "e1", Decision: policy.Allowed, RemainingBytes: start - 3*gib},
		{EventID: "e2", Decision: policy.Allowed, RemainingBytes: start - 9*gib},
		{EventID: "e3", Decision: policy.BlockedFamilyQuota, RemainingBytes: start - 9*gib},
		{EventID: "e4", Decision: policy.BlockedNotMember, RemainingBytes: start - 9*gib},
	}
	trim := func(ds []gateway.EventDecision) []gateway.EventDecision {
		out := make([]gateway.EventDecision, len(ds))
		for i, x := range ds {
			out[i] = gateway.EventDecision{EventID: x.EventID, Decision: x.Decision, RemainingBytes: x.RemainingBytes, Duplicate: x.Duplicate}
		}
		return out
	}
	if diff := cmp.Diff(want, trim(got)); diff != "" {
		t.Fatalf("decisions (-want +got):\n%s", diff)
	}
	if got[2].Rule == "" {
		t.Errorf("a block names its rule: %+v", got[2])
	}
	// A retry of the batch: the original answers, flagged, nothing charged.
	again := d.decide(http.StatusOK, d.event("e1", famA, childA, 3*gib), d.event("e2", famA, ownerA, 6*gib),
		d.event("e3", famA, childA, 2*gib), d.event("e4", famA, 5555, 1))
	for i := range got {
		got[i].Duplicate = true
	}
	if diff := cmp.Diff(got, again); diff != "" {
		t.Errorf("retry (-want +got):\n%s", diff)
	}
	if p := pool(); p != start-9*gib {
		t.Errorf("pool %d after the retry, want %d", p, start-9*gib)
	}
	d.persisted("e1", "e2", "e3", "e4")

	// Bad events are refused before anything is judged.
	for _, c := range []struct {
		name string
		ev   gateway.UsageEvent
		loc  string
	}{
		{"no id", d.event("", famA, childA, 1), "body.events[0].eventId"},
		{"too old", gateway.UsageEvent{EventID: "old", Timestamp: d.clock().Add(-24 * time.Hour), FamilyID: famA, CustomerID: childA, AppID: "a", BytesUsed: 1}, "body.events[0].timestamp"},
		{"future", gateway.UsageEvent{EventID: "future", Timestamp: d.clock().Add(time.Hour), FamilyID: famA, CustomerID: childA, AppID: "a", BytesUsed: 1}, "body.events[0].timestamp"},
		{"negative", d.event("neg", famA, childA, -1), "body.events[0].bytesUsed"},
	} {
		d.problem(http.MethodPost, "/decisions", testGateway, gateway.DecisionAsk{Events: []gateway.UsageEvent{c.ev}}, http.StatusUnprocessableEntity, c.loc)
	}
	d.problem(http.MethodPost, "/decisions", testGateway, `{"events":[]}`, http.StatusUnprocessableEntity, "body.events")
	d.problem(http.MethodPost, "/decisions", testGateway, gateway.DecisionAsk{}, http.StatusUnprocessableEntity, "body.events")
	if p := pool(); p != start-9*gib {
		t.Errorf("pool %d after refusals, want %d", p, start-9*gib)
	}
}

// TestDecideGroupCommit: concurrent callers share pipelines, and each gets
// the answers to its own events.
func TestDecideGroupCommit(t *testing.T) {
	d := newDecideFixture(t, judge.WithLinger(20*time.Millisecond), judge.WithMaxBatch(1000), judge.WithConcurrency(1))
	const callers = 40
	var wg sync.WaitGroup
	gate := make(chan struct{})
	got := make([][]quota.Result, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			// Caller i: two events of its own member; family B's pool is
			// 10 GiB, the amounts distinct, so each answer is recognisable.
			envs := []envelope.Envelope[envelope.UsagePayload]{
				envelope.New(fmt.Sprintf("g%d-a", i), d.clock(), envelope.UsagePayload{FamilyID: famB, CustomerID: childB, AppID: "com.app", BytesUsed: int64(i + 1)}),
				envelope.New(fmt.Sprintf("g%d-b", i), d.clock(), envelope.UsagePayload{FamilyID: famB, CustomerID: 9999, AppID: "com.app", BytesUsed: 1}),
			}
			got[i], errs[i] = d.dec.Decide(context.Background(), envs)
		}()
	}
	close(gate)
	wg.Wait()
	var used int64
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if len(got[i]) != 2 || got[i][0].Decision != policy.Allowed || got[i][1].Decision != policy.BlockedNotMember {
			t.Fatalf("caller %d: %+v", i, got[i])
		}
		used += int64(i + 1)
	}
	// The remaining after each caller's own event is unique and consistent
	// with some order of the callers: sorting them rebuilds the sequence.
	rem := make([]int64, callers)
	for i := range callers {
		rem[i] = got[i][0].Remaining + int64(i+1) // the pool before caller i's event
	}
	st, err := d.engine.Family(context.Background(), famB)
	if err != nil {
		t.Fatal(err)
	}
	if want := 10*gib - used; st.Remaining != want {
		t.Errorf("pool %d, want %d", st.Remaining, want)
	}
	if slices.Max(rem) != 10*gib {
		t.Errorf("no caller saw the full pool before its event: %v", rem)
	}
	n := d.batches.Load()
	d.mu.Lock()
	requests := 0
	for _, b := range d.infos {
		requests += b.Requests
	}
	d.mu.Unlock()
	if requests != callers || n >= callers/2 {
		t.Errorf("%d callers in %d group commits (%d requests counted), want fewer than %d commits", callers, n, requests, callers/2)
	}
	t.Logf("%d callers in %d group commits", callers, n)
}

// asked is the outcome of a /decisions request sent by decideAsync.
type asked struct {
	status    int
	decisions []gateway.EventDecision
	detail    string
	err       error
}

// decideAsync posts evs with the gateway credential in the background.
func (d *decideFixture) decideAsync(evs ...gateway.UsageEvent) <-chan asked {
	out := make(chan asked, 1)
	body, err := json.Marshal(gateway.DecisionAsk{Events: evs})
	if err != nil {
		d.t.Fatal(err)
	}
	go func() {
		req, err := http.NewRequest(http.MethodPost, d.srv.URL+"/decisions", strings.NewReader(string(body)))
		if err != nil {
			out <- asked{err: err}
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+testGateway)
		resp, err := d.srv.Client().Do(req)
		if err != nil {
			out <- asked{err: err}
			return
		}
		defer resp.Body.Close()
		var a asked
		a.status = resp.StatusCode
		var v struct {
			Decisions []gateway.EventDecision `json:"decisions"`
			Detail    string                  `json:"detail"`
		}
		a.err = json.NewDecoder(resp.Body).Decode(&v)
		a.decisions, a.detail = v.Decisions, v.Detail
		out <- a
	}()
	return out
}

// waitUnavailable waits until the decisions refuse new callers (a batch's
// records are in neither Kafka nor the spool), failing if ask answers first.
func (d *decideFixture) waitUnavailable(ask <-chan asked) {
	d.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for d.dec.Available() {
		select {
		case a := <-ask:
			d.t.Fatalf("answered while its records are in neither Kafka nor the spool: %+v", a)
		default:
		}
		if time.Now().After(deadline) {
			d.t.Fatal("decisions still available 10 s after a batch's records were refused")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDecideKafkaDown, without a spool (#23, 5): a batch whose records Kafka
// does not acknowledge is charged, so its caller is not refused (a refusal
// leaves no charge): it waits, while every new caller is refused unjudged
// (503 nothing granted, Redis unchanged); once Kafka is back the records
// reach it, the waiting caller gets its answer, and a retry gets the
// original answer, flagged duplicate, charged once.
func TestDecideKafkaDown(t *testing.T) {
	d := newDecideFixture(t)
	pool := func() int64 {
		st, err := d.engine.Family(context.Background(), famA)
		if err != nil {
			t.Fatal(err)
		}
		return st.Remaining
	}
	start := pool()
	d.down.Store(true)
	k1 := d.decideAsync(d.event("k1", famA, childA, mib))
	d.waitUnavailable(k1)
	afterK1 := pool()
	if afterK1 != start-mib {
		t.Fatalf("pool %d, want %d (k1 judged and charged)", afterK1, start-mib)
	}
	// While k1's records wait, nothing else is judged, and the refusal
	// says nothing was granted.
	p := d.problem(http.MethodPost, "/decisions", testGateway, gateway.DecisionAsk{Events: []gateway.UsageEvent{d.event("k2", famA, childA, mib)}},
		http.StatusServiceUnavailable, "")
	if !strings.Contains(p.Detail, "nothing granted") {
		t.Errorf("503 without judging says %q, want nothing granted", p.Detail)
	}
	if p := pool(); p != afterK1 {
		t.Errorf("pool %d after a refusal while Kafka is down, want %d (unchanged)", p, afterK1)
	}
	d.down.Store(false)
	a := <-k1
	if a.err != nil || a.status != http.StatusOK || len(a.decisions) != 1 || a.decisions[0].Decision != policy.Allowed ||
		a.decisions[0].RemainingBytes != start-mib {
		t.Fatalf("k1 once Kafka is back: %+v", a)
	}
	if !d.dec.Available() {
		t.Error("decisions unavailable after the waiting batch was answered")
	}
	got := d.decide(http.StatusOK, d.event("k1", famA, childA, mib), d.event("k2", famA, childA, mib))
	if !got[0].Duplicate || got[0].RemainingBytes != start-mib || got[1].Duplicate || got[1].RemainingBytes != start-2*mib {
		t.Errorf("after Kafka is back: %+v", got)
	}
	d.persisted("k1", "k2")
}

// A batch whose records wait when the decisions close is answered 503
// saying it was judged and counted, and Close stores the records if it can.
func TestDecideCloseWhileRecordsWait(t *testing.T) {
	d := newDecideFixture(t)
	d.down.Store(true)
	c1 := d.decideAsync(d.event("c1", famA, childA, mib))
	d.waitUnavailable(c1)
	d.down.Store(false) // Kafka back just as the server stops
	if err := d.dec.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v (the records could be produced)", err)
	}
	a := <-c1
	if a.status != http.StatusServiceUnavailable || !strings.Contains(a.detail, "judged and counted") {
		t.Errorf("c1 at Close: %+v", a)
	}
	d.persisted("c1")
}

// TestDecideStaleRedis: a state of no or another generation answers 503,
// never a guess; the state SQL names answers.
func TestDecideStaleRedis(t *testing.T) {
	var gen atomic.Value
	gen.Store("g1")
	d := newDecideFixture(t, judge.WithGenerations(genFunc(func(context.Context) (string, error) { return gen.Load().(string), nil })))
	ctx := context.Background()
	d.decide(http.StatusServiceUnavailable, d.event("s1", famA, childA, mib)) // no marker: never rebuilt
	if err := d.engine.FinishRebuild(ctx, "g1", nil); err != nil {
		t.Fatal(err)
	}
	if got := d.decide(http.StatusOK, d.event("s1", famA, childA, mib)); got[0].Decision != policy.Allowed {
		t.Fatalf("%+v", got)
	}
	if _, err := d.engine.BeginRebuild(ctx, "g2"); err != nil {
		t.Fatal(err)
	}
	d.decide(http.StatusServiceUnavailable, d.event("s2", famA, childA, mib)) // being rebuilt
	if err := d.engine.FinishRebuild(ctx, "g2", nil); err != nil {
		t.Fatal(err)
	}
	d.decide(http.StatusServiceUnavailable, d.event("s3", famA, childA, mib)) // SQL still names g1
	gen.Store("g2")
	// (s2 and s3 ran on the untrusted state, as ApplyMarked allows: a real
	// rebuild replaces what they touched.)
	if got := d.decide(http.StatusOK, d.event("s4", famA, childA, mib)); got[0].Decision != policy.Allowed || got[0].Duplicate {
		t.Fatalf("%+v", got)
	}
	gen.Store("")
	d.decide(http.StatusServiceUnavailable, d.event("s5", famA, childA, mib))
}

// TestDecideCredentials: POST /decisions takes a gateway credential and
// nothing else; a gateway credential opens no other route.
func TestDecideCredentials(t *testing.T) {
	d := newDecideFixture(t)
	body := gateway.DecisionAsk{Events: []gateway.UsageEvent{d.event("c1", famA, childA, 1)}}
	for _, c := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", 401},
		{"member", d.token(childA), 401},
		{"owner", d.token(ownerA), 401},
		{"admin", d.token(adminID), 401},
		{"a gateway token's prefix", testGateway[:20], 401},
		{"a gateway token and more", testGateway + "x", 401},
		{"gateway", testGateway, 200},
		{"the other gateway", "gw_other_0123456789abcdef0123456789ab", 200},
	} {
		resp, data := d.do(http.MethodPost, "/decisions", c.token, body)
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d: %s", c.name, resp.StatusCode, c.want, data)
		}
		if c.want == 401 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%s: content type %q", c.name, resp.Header.Get("Content-Type"))
		}
	}
	// Every other secured operation of the document refuses the gateway.
	_, data := d.do(http.MethodGet, "/openapi.json", "", nil)
	var doc struct {
		Paths map[string]map[string]struct {
			Security []map[string][]string `json:"security"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if len(op.Security) == 0 {
				continue
			}
			_, gw := op.Security[0][gateway.Scheme]
			if gw != (path == "/decisions") {
				t.Errorf("%s %s: security %v", method, path, op.Security)
			}
			if gw {
				continue
			}
			p := strings.NewReplacer("{familyId}", "100", "{customerId}", "1002", "{id}", "1", "{templateId}", "1", "{notificationId}", "1").Replace(path)
			resp, body := d.do(strings.ToUpper(method), p, testGateway, map[string]any{})
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s %s with a gateway token: %d, want 401: %s", method, p, resp.StatusCode, body)
			}
			checked++
		}
	}
	if checked < 20 {
		t.Errorf("checked %d secured operations, want every one (≥ 20)", checked)
	}
}

// TestDecideDisabled: without SyncDecisions the route answers 503.
func TestDecideDisabled(t *testing.T) {
	f := newAPIFixture(t, func(c *Config) { c.GatewayTokens = []string{testGateway} })
	f.problem(http.MethodPost, "/decisions", testGateway, gateway.DecisionAsk{Events: []gateway.UsageEvent{{EventID: "x", Timestamp: f.clock(),
		FamilyID: famA, CustomerID: childA, AppID: "a"}}}, http.StatusServiceUnavailable, "")
}

// rebuildGuard is a judge.StateGuard that "rebuilds" by naming a new
// generation on the fixture's engine (a real one also reads SQL back).
type rebuildGuard struct {
	d     *decideFixture
	mu    sync.Mutex
	gen   string
	calls []string // the causes Recover was called with
	done  chan struct{}
}

func (g *rebuildGuard) Generation(context.Context) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gen, nil
}

func (g *rebuildGuard) Recover(ctx context.Context, used string, cause error) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, cause.Error())
	next := fmt.Sprintf("g%d", len(g.calls)+1)
	if _, err := g.d.engine.BeginRebuild(ctx, next); err != nil {
		return "", err
	}
	if err := g.d.engine.FinishRebuild(ctx, next, nil); err != nil {
		return "", err
	}
	g.gen = next
	close(g.done)
	return next, nil
}

// TestDecideRollback: Redis rolled back past a grant of /decisions (same
// generation, older state) is detected by the next decision of the instance
// that granted it: 503, never a second grant on the lost charge (10 GiB plan:
// 6 GiB granted, then 6 GiB more would be 12) and never a different answer to
// a retry of the lost event; and its state guard is asked to recover Redis,
// after which decisions are granted again.
func TestDecideRollback(t *testing.T) {
	guard := &rebuildGuard{gen: "g1", done: make(chan struct{})}
	d := newDecideFixture(t, judge.WithStateGuard(guard))
	guard.d = d
	ctx := context.Background()
	if err := d.engine.FinishRebuild(ctx, "g1", nil); err != nil {
		t.Fatal(err)
	}
	if got := d.decide(http.StatusOK, d.event("warm", famA, childA, 1)); got[0].Decision != policy.Allowed {
		t.Fatalf("%+v", got)
	}
	before := testenv.Snapshot(t, d.rdb)
	if got := d.decide(http.StatusOK, d.event("r1", famA, childA, 6*gib)); got[0].Decision != policy.Allowed {
		t.Fatalf("r1: %+v", got)
	}
	before.RollBack(t, d.rdb)
	// (The scripts of a refused batch may run on the rolled-back state, as
	// ApplyMarked allows: the rebuild replaces what they touched.)
	d.decide(http.StatusServiceUnavailable, d.event("r2", famA, childA, 6*gib))
	select {
	case <-guard.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the state guard was not asked to recover Redis within 10 s")
	}
	guard.mu.Lock()
	calls := slices.Clone(guard.calls)
	guard.mu.Unlock()
	if len(calls) != 1 || !strings.Contains(calls[0], judge.DecisionStream) {
		t.Errorf("Recover called with %q, want once, naming the instance's stream", calls)
	}
	// A new generation: granted again (this fixture's "rebuild" reads no
	// SQL back, so the pool is the rolled-back one).
	if got := d.decide(http.StatusOK, d.event("r3", famA, childA, 1)); got[0].Decision != policy.Allowed || got[0].Duplicate {
		t.Fatalf("after the recovery: %+v", got)
	}
}

// flakySpool is an outbox.Spool that fails while down is set.
type flakySpool struct {
	sql  *outbox.Spool
	down atomic.Bool
}

func (f *flakySpool) Spool(ctx context.Context, recs []*kgo.Record) error {
	if f.down.Load() {
		return errors.New("dial tcp 127.0.0.1:3306: connect: connection refused")
	}
	return f.sql.Spool(ctx, recs)
}

// newSpooledFixture is a decide fixture whose decisions spool to its SQL
// outbox through a flakySpool; it returns the spool and the database.
func newSpooledFixture(t *testing.T) (*decideFixture, *flakySpool, *sql.DB) {
	t.Helper()
	var sp *flakySpool
	var db *sql.DB
	d := newDecideFixtureSpool(t, func(sdb *sql.DB) judge.Spool {
		s, err := outbox.NewSpool(sdb, sqldialect.Unknown, nil)
		if err != nil {
			t.Fatal(err)
		}
		sp, db = &flakySpool{sql: s}, sdb
		return sp
	})
	return d, sp, db
}

// drainOutbox publishes the spooled usage-persist rows to the fixture's
// Kafka with a relay until none is pending (20 s at most).
func (d *decideFixture) drainOutbox(db *sql.DB) {
	d.t.Helper()
	ctx := context.Background()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(d.kafka.ListenAddrs()...))
	if err != nil {
		d.t.Fatal(err)
	}
	defer pcl.Close()
	relay, err := outbox.New(db, pcl, outbox.WithKeep(envelope.TopicUsagePersist))
	if err != nil {
		d.t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		n, err := outbox.Pending(ctx, db, envelope.TopicUsagePersist)
		if err != nil {
			d.t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%d spooled rows not published in 20 s", n)
		}
		if _, err := relay.Poll(ctx); err != nil {
			d.t.Logf("relay: %v", err)
		}
	}
}

// TestDecideKafkaDownSpooled (#23, 5): while Kafka does not acknowledge, a
// decision is answered (200) once its records are in the SQL outbox, and
// the relay publishes them when Kafka is back; with SQL down too, the
// batch's caller waits (it is charged) while new callers are refused
// unjudged, and is answered once SQL takes the records. Every answer given
// is in usage-persist at the end.
func TestDecideKafkaDownSpooled(t *testing.T) {
	d, sp, db := newSpooledFixture(t)
	ctx := context.Background()
	pool := func() int64 {
		st, err := d.engine.Family(ctx, famA)
		if err != nil {
			t.Fatal(err)
		}
		return st.Remaining
	}
	spooled := func() int64 {
		n, err := outbox.Pending(ctx, db, envelope.TopicUsagePersist)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	start := pool()
	d.down.Store(true)
	got := d.decide(http.StatusOK, d.event("s1", famA, childA, mib))
	if got[0].Decision != policy.Allowed || got[0].RemainingBytes != start-mib {
		t.Fatalf("s1 with Kafka down: %+v", got)
	}
	if !d.dec.Spooling() || spooled() != 1 {
		t.Fatalf("spooling %v, %d usage-persist rows in the outbox, want true, 1", d.dec.Spooling(), spooled())
	}
	got = d.decide(http.StatusOK, d.event("s2", famA, childA, mib))
	if got[0].Decision != policy.Allowed || got[0].RemainingBytes != start-2*mib || spooled() != 2 {
		t.Fatalf("s2 with Kafka down: %+v, %d rows", got, spooled())
	}

	// SQL fails too: s3 is charged and waits; nothing more is judged.
	sp.down.Store(true)
	s3 := d.decideAsync(d.event("s3", famA, childA, mib))
	d.waitUnavailable(s3)
	if pl := pool(); pl != start-3*mib {
		t.Fatalf("pool %d after s3, want %d (charged)", pl, start-3*mib)
	}
	p := d.problem(http.MethodPost, "/decisions", testGateway, gateway.DecisionAsk{Events: []gateway.UsageEvent{d.event("s4", famA, childA, mib)}},
		http.StatusServiceUnavailable, "")
	if !strings.Contains(p.Detail, "nothing granted") || pool() != start-3*mib {
		t.Errorf("s4 while s3's records wait: %q, pool %d", p.Detail, pool())
	}
	sp.down.Store(false) // SQL back: s3's records are spooled, s3 answered
	a := <-s3
	if a.err != nil || a.status != http.StatusOK || len(a.decisions) != 1 || a.decisions[0].RemainingBytes != start-3*mib {
		t.Fatalf("s3 once SQL is back: %+v", a)
	}
	if n := spooled(); n != 3 {
		t.Errorf("%d usage-persist rows in the outbox, want 3", n)
	}
	// The batches say what they spooled: every outbox row, all topics (a
	// batch reports after answering: wait for s3's).
	var rows, said int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	for wait := time.Now().Add(10 * time.Second); said != rows; time.Sleep(5 * time.Millisecond) {
		said = 0
		d.mu.Lock()
		for _, b := range d.infos {
			said += b.Spooled
		}
		d.mu.Unlock()
		if time.Now().After(wait) {
			t.Fatalf("batches spooled %d records, the outbox holds %d rows", said, rows)
		}
	}
	if rows < 3 {
		t.Errorf("%d outbox rows, want ≥ 3", rows)
	}
	got = d.decide(http.StatusOK, d.event("s3", famA, childA, mib), d.event("s4", famA, childA, mib))
	if !got[0].Duplicate || got[0].RemainingBytes != start-3*mib || got[1].Duplicate || got[1].RemainingBytes != start-4*mib {
		t.Errorf("retry of s3 and s4: %+v", got)
	}

	// Kafka back: the relay publishes the spooled rows, the decisions
	// produce to Kafka again.
	d.down.Store(false)
	d.drainOutbox(db)
	deadline := time.Now().Add(20 * time.Second)
	for d.dec.Spooling() {
		if time.Now().After(deadline) {
			t.Fatal("still spooling 20 s after Kafka came back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	got = d.decide(http.StatusOK, d.event("s5", famA, childA, mib))
	if got[0].RemainingBytes != start-5*mib || spooled() != 0 {
		t.Errorf("s5: %+v, %d rows spooled", got, spooled())
	}
	if seen := d.persisted("s1", "s2", "s3", "s4", "s5"); len(seen) != 5 {
		t.Errorf("usage-persist: %v", seen)
	}
}

// TestDecideOutagesInterleaved drives /decisions through random sequences
// of Kafka and SQL outages and recoveries, new events and retries (a
// seeded state machine against a model; the seed and the steps are
// logged on failure). After every step: the pool is charged exactly for
// the events answered 200 or waiting for their records, a 503 judged
// nothing (it says "nothing granted" and the pool did not move), a retry
// gets the original answer flagged duplicate, and a caller whose records
// (a retry's are produced again too) can be stored nowhere waits instead of
// being refused. At the end, with
// both back and the relay drained, every charged event is in usage-persist.
func TestDecideOutagesInterleaved(t *testing.T) {
	testenv.SkipShort(t, "Redis, Kafka and SQL outages interleaved under decisions")
	const kib = 1024
	for seed := range uint64(10) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 23))
			d, sp, db := newSpooledFixture(t)
			ctx := context.Background()
			var steps []string
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("seed %d after %v: %s", seed, steps, fmt.Sprintf(format, args...))
			}
			pool := func() int64 {
				st, err := d.engine.Family(ctx, famA)
				if err != nil {
					t.Fatal(err)
				}
				return st.Remaining
			}
			start := pool()
			answers := map[string]int64{} // id → remaining it was answered with
			var ids []string
			var waiting <-chan asked // a caller waiting for its records
			var waitingID string
			charged := func() int64 {
				n := int64(len(answers))
				if _, retry := answers[waitingID]; waiting != nil && !retry {
					n++
				}
				return n
			}
			// settle waits for the waiting caller once Kafka or SQL is up.
			settle := func() {
				if waiting == nil || (d.down.Load() && sp.down.Load()) {
					return
				}
				select {
				case a := <-waiting:
					orig, retry := answers[waitingID]
					if a.err != nil || a.status != http.StatusOK || len(a.decisions) != 1 || a.decisions[0].Duplicate != retry ||
						retry && a.decisions[0].RemainingBytes != orig {
						fail("waiting %s answered %+v", waitingID, a)
					}
					answers[waitingID] = a.decisions[0].RemainingBytes
					waiting = nil
				case <-time.After(20 * time.Second):
					fail("waiting %s not answered 20 s after Kafka or SQL came back", waitingID)
				}
			}
			for range 14 {
				switch op := rng.IntN(4); op {
				case 0:
					d.down.Store(!d.down.Load())
					steps = append(steps, fmt.Sprintf("kafka-down=%v", d.down.Load()))
					settle()
				case 1:
					sp.down.Store(!sp.down.Load())
					steps = append(steps, fmt.Sprintf("sql-down=%v", sp.down.Load()))
					settle()
				default:
					id := fmt.Sprintf("o%d", len(ids))
					if len(ids) > 0 && rng.IntN(3) == 0 {
						id = ids[rng.IntN(len(ids))]
					} else {
						ids = append(ids, id)
					}
					steps = append(steps, "ask "+id)
					before := pool()
					ask := d.decideAsync(d.event(id, famA, childA, kib))
					var a asked
					got := false
					for deadline := time.Now().Add(20 * time.Second); !got; {
						select {
						case a = <-ask:
							got = true
							continue
						default:
						}
						if waiting == nil && !d.dec.Available() {
							break // this caller waits for its records
						}
						if time.Now().After(deadline) {
							fail("%s neither answered nor waiting after 20 s", id)
						}
						time.Sleep(2 * time.Millisecond)
					}
					if !got {
						// A retry's records are produced again too: it
						// waits like a new event, charged nothing more.
						waiting, waitingID = ask, id
						break
					}
					orig, seen := answers[id]
					switch {
					case a.err != nil:
						fail("%s: %v", id, a.err)
					case a.status == http.StatusServiceUnavailable:
						if !strings.Contains(a.detail, "nothing granted") || pool() != before {
							fail("%s refused with %q, pool %d → %d", id, a.detail, before, pool())
						}
					case a.status != http.StatusOK || len(a.decisions) != 1:
						fail("%s: %+v", id, a)
					case seen:
						if !a.decisions[0].Duplicate || a.decisions[0].RemainingBytes != orig {
							fail("retry of %s: %+v, want duplicate with remaining %d", id, a.decisions[0], orig)
						}
					default:
						if a.decisions[0].Duplicate || a.decisions[0].Decision != policy.Allowed {
							fail("%s: %+v", id, a.decisions[0])
						}
						answers[id] = a.decisions[0].RemainingBytes
					}
				}
				if p := pool(); p != start-charged()*kib {
					fail("pool %d, want %d (%d events charged)", p, start-charged()*kib, charged())
				}
			}
			t.Logf("%v", steps)
			// Both back: the waiting caller is answered, the relay drains
			// the outbox, and every charged event is in usage-persist.
			d.down.Store(false)
			sp.down.Store(false)
			settle()
			d.drainOutbox(db)
			var want []string
			for id := range answers {
				want = append(want, id)
			}
			if len(want) > 0 {
				d.persisted(want...)
			}
			if p := pool(); p != start-int64(len(answers))*kib {
				fail("pool %d at the end, want %d", p, start-int64(len(answers))*kib)
			}
		})
	}
}
