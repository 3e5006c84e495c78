package backoffice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/api/view"
	"github.com/dabom/dpcs/service/family"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/kafkaops"
	"github.com/dabom/dpcs/service/store"
)

// The back-office routes on a huma API of their own, with the API's
// functions replaced by small ones: an admin for every request unless
// denied, and a problem mapping of the store's not-found and refusals.
// service/api's tests run the same routes behind the real authorization
// and error mapping (TestAuthorizationMatrix, TestTemplateDriftRoutes,
// TestDeadLetterRoutes, TestOperationsView).

const adminID = int64(9000)

var admin = store.Actor{ID: adminID, Role: policy.RoleAdmin}

type fixture struct {
	t      *testing.T
	srv    *httptest.Server
	store  *store.Store
	engine *quota.Engine
	now    time.Time
	deny   bool
}

func newFixture(t *testing.T, mod func(*Config)) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{t: t, now: time.Date(2026, 2, 10, 12, 0, 0, 0, time.UTC)}
	clock := func() time.Time { return f.now }
	db := testenv.SQLite(t)
	if err := store.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	var err error
	if f.store, err = store.New(db, store.WithClock(clock), store.WithBcryptCost(4)); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	if f.engine, err = quota.New(rdb, quota.WithClock(clock)); err != nil {
		t.Fatal(err)
	}
	qs, err := judge.NewState(f.engine)
	if err != nil {
		t.Fatal(err)
	}
	fam, err := family.New(f.store, qs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.AddMember(ctx, store.NewMember{ID: adminID, Name: "ops", Role: policy.RoleAdmin}, store.System); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	hc := huma.DefaultConfig("back office test", "1.0.0")
	hc.CreateHooks = nil
	api := humago.New(mux, hc)
	cfg := Config{Store: f.store, Family: fam, Clock: clock,
		Admin: func(context.Context) (store.Actor, error) {
			if f.deny {
				return store.Actor{}, huma.Error403Forbidden("back-office route: ADMIN or AGENT only")
			}
			return admin, nil
		},
		Problem: func(_ context.Context, err error, loc string) error {
			switch {
			case errors.Is(err, store.ErrNotFound):
				return huma.Error404NotFound("not found")
			case errors.Is(err, store.ErrInvalid), errors.Is(err, policy.ErrInvalid), errors.Is(err, store.ErrConflict):
				return huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: loc, Message: "refused"})
			}
			return huma.Error500InternalServerError("internal error")
		},
		PolicyView: func(r family.PolicyResult) view.PolicyView {
			return view.PolicyView{FamilyID: r.Policy.FamilyID, CustomerID: r.Policy.CustomerID, Version: r.Policy.Version, Rules: r.Policy.Rules}
		},
		Period: func(string, time.Time, time.Time) (time.Time, time.Time, error) {
			from, to := f.store.MonthRange(clock())
			return from, to, nil
		}}
	if mod != nil {
		mod(&cfg)
	}
	if err := Register(api, cfg); err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// call sends body (JSON) and wants status; the answer is decoded into out
// when it is not nil.
func (f *fixture) call(method, path string, body any, status int, out any) {
	f.t.Helper()
	var r *strings.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			f.t.Fatal(err)
		}
		r = strings.NewReader(string(b))
	} else {
		r = strings.NewReader("")
	}
	req, err := http.NewRequest(method, f.srv.URL+path, r)
	if err != nil {
		f.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	_ = json.NewDecoder(resp.Body).Decode(&raw)
	if resp.StatusCode != status {
		f.t.Fatalf("%s %s: %d, want %d: %s", method, path, resp.StatusCode, status, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			f.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
}

func TestRegisterNeedsTheAPIsFunctions(t *testing.T) {
	api := humago.New(http.NewServeMux(), huma.DefaultConfig("t", "1"))
	if err := Register(api, Config{}); err == nil {
		t.Fatal("registered without a store, a family service or the API's functions")
	}
}

// TestTemplatesFamiliesAudit walks the back office's template, family and
// audit routes: a template made, applied, drifted from and re-applied, a
// family made, found and re-planned, all of it in the audit log with names.
func TestTemplatesFamiliesAudit(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	var tv TemplateView
	f.call(http.MethodPost, "/admin/policy-templates", TemplateBody{Name: "Teen", Type: "LIMIT",
		DefaultRules: map[string]string{policy.KeyLimitDaily: "1048576"}, Active: true}, http.StatusCreated, &tv)
	f.call(http.MethodGet, fmt.Sprintf("/admin/policy-templates/%d", tv.ID), nil, http.StatusOK, &tv)
	if tv.RequireRole != string(policy.RoleMember) || tv.DefaultRules[policy.KeyLimitDaily] != "1048576" {
		t.Fatalf("template %+v", tv)
	}
	f.call(http.MethodGet, "/admin/policy-templates/999", nil, http.StatusNotFound, nil)

	var fv FamilyView
	f.call(http.MethodPost, "/admin/families", NewFamily{ID: 100, Name: "Kim", PlanBytes: 1 << 30, Thresholds: []int{10, 50}}, http.StatusCreated, &fv)
	if fv.ID != 100 || fv.PlanBytes != 1<<30 || fmt.Sprint(fv.Thresholds) != "[50 10]" {
		t.Fatalf("family %+v", fv)
	}
	f.call(http.MethodPost, "/admin/families", NewFamily{Name: "Bad", Thresholds: []int{0}}, http.StatusUnprocessableEntity, nil)
	if _, err := f.store.AddMember(ctx, store.NewMember{ID: 1001, FamilyID: 100, Name: "Minji", Phone: "010-1234-5678", Role: policy.RoleMember}, store.System); err != nil {
		t.Fatal(err)
	}
	if err := f.engine.AddMember(ctx, 100, 1001); err != nil {
		t.Fatal(err)
	}
	var found FamilyList
	f.call(http.MethodGet, "/admin/families?q=010-1234-5678", nil, http.StatusOK, &found)
	if len(found.Families) != 1 || len(found.Families[0].Matched) != 1 || found.Families[0].Matched[0].By != "phone" {
		t.Fatalf("search by phone: %+v", found)
	}
	f.call(http.MethodGet, "/admin/families?q=1001", nil, http.StatusOK, &found)
	if len(found.Families) != 1 || found.Families[0].Matched[0].By != "id" {
		t.Fatalf("search by id: %+v", found)
	}
	f.call(http.MethodPut, "/admin/families/100/plan", Plan{PlanBytes: 2 << 30}, http.StatusOK, &fv)
	if fv.PlanBytes != 2<<30 {
		t.Fatalf("plan %+v", fv)
	}

	var pv view.PolicyView
	f.call(http.MethodPost, fmt.Sprintf("/admin/policy-templates/%d/apply", tv.ID), TemplateApplication{FamilyID: 100, CustomerID: 1001},
		http.StatusOK, &pv)
	if pv.CustomerID != 1001 || pv.Rules[policy.KeyLimitDaily] != "1048576" {
		t.Fatalf("applied %+v", pv)
	}
	// The template changes: its copy drifts, and a re-apply of all
	// brings it back.
	tv.DefaultRules[policy.KeyLimitDaily] = "2097152"
	f.call(http.MethodPut, fmt.Sprintf("/admin/policy-templates/%d", tv.ID), tv.TemplateBody, http.StatusOK, &tv)
	var d TemplateDrift
	f.call(http.MethodGet, fmt.Sprintf("/admin/policy-templates/%d/drift", tv.ID), nil, http.StatusOK, &d)
	if d.Drifted != 1 || len(d.Items) != 1 || d.Items[0].MemberName != "Minji" || d.Items[0].Diffs[0].Change != "changed" {
		t.Fatalf("drift %+v", d)
	}
	f.call(http.MethodPost, fmt.Sprintf("/admin/policy-templates/%d/reapply", tv.ID), TemplateReapplication{}, http.StatusUnprocessableEntity, nil)
	var rep ReapplyReport
	f.call(http.MethodPost, fmt.Sprintf("/admin/policy-templates/%d/reapply", tv.ID), TemplateReapplication{All: true}, http.StatusOK, &rep)
	if rep.Reapplied != 1 || rep.Remaining != 0 || rep.Results[0].Policy.Rules[policy.KeyLimitDaily] != "2097152" {
		t.Fatalf("reapply %+v", rep)
	}

	var usage FamilyUsageView
	f.call(http.MethodGet, "/admin/families/100/usage", nil, http.StatusOK, &usage)
	if usage.FamilyID != 100 || usage.ByApp == nil || usage.ByHour == nil {
		t.Fatalf("usage %+v", usage)
	}
	f.call(http.MethodGet, "/admin/families/404/usage", nil, http.StatusNotFound, nil)

	var page AuditPage
	f.call(http.MethodGet, "/admin/audit-log?limit=2", nil, http.StatusOK, &page)
	if len(page.Entries) != 2 || page.NextBefore == 0 || page.Entries[0].ActorName != "ops" {
		t.Fatalf("audit page %+v", page)
	}
	f.call(http.MethodGet, "/admin/audit-log?target=member:1001", nil, http.StatusOK, &page)
	if len(page.Entries) == 0 || page.Entries[0].TargetName != "Minji" {
		t.Fatalf("audit of the member %+v", page)
	}

	var list TemplateList
	f.call(http.MethodGet, "/admin/policy-templates?active=true", nil, http.StatusOK, &list)
	if len(list.Templates) != 1 {
		t.Fatalf("templates %+v", list)
	}
	f.call(http.MethodDelete, fmt.Sprintf("/admin/policy-templates/%d", tv.ID), nil, http.StatusNoContent, nil)
	f.call(http.MethodGet, fmt.Sprintf("/admin/policy-templates/%d", tv.ID), nil, http.StatusNotFound, nil)

	f.deny = true
	f.call(http.MethodGet, "/admin/policy-templates", nil, http.StatusForbidden, nil)
	f.call(http.MethodGet, "/admin/operations", nil, http.StatusForbidden, nil)
}

// fakeDeadLetters holds dead letters in memory; a replay is recorded.
type fakeDeadLetters struct {
	records  []kafkaops.DeadLetter
	replayed []kafkaops.DeadLetter
	fail     bool
}

func (k *fakeDeadLetters) List(_ context.Context, q kafkaops.DeadLetterQuery) (kafkaops.DeadLetterPage, error) {
	if k.fail {
		return kafkaops.DeadLetterPage{}, errors.New("broker down")
	}
	var p kafkaops.DeadLetterPage
	for _, d := range k.records {
		if before, ok := q.Before[d.TopicPartition]; q.Before != nil && (!ok || d.Offset >= before) {
			continue
		}
		if len(p.Records) == q.Limit {
			p.Next = map[kafkaops.TopicPartition]int64{d.TopicPartition: p.Records[len(p.Records)-1].Offset}
			break
		}
		p.Records = append(p.Records, d)
	}
	return p, nil
}

func (k *fakeDeadLetters) Get(_ context.Context, tp kafkaops.TopicPartition, offset int64) (kafkaops.DeadLetter, error) {
	for _, d := range k.records {
		if d.TopicPartition == tp && d.Offset == offset {
			return d, nil
		}
	}
	return kafkaops.DeadLetter{}, kafkaops.ErrDeadLetterNotFound
}

func (k *fakeDeadLetters) Replay(_ context.Context, d kafkaops.DeadLetter) error {
	k.replayed = append(k.replayed, d)
	return nil
}

// TestDeadLetters: the browser shows each record's origin, reason and
// payload in the encoding it allows, pages with a cursor it refuses when
// forged, and replays a record once.
func TestDeadLetters(t *testing.T) {
	f := newFixture(t, nil)
	f.call(http.MethodGet, "/admin/dead-letters", nil, http.StatusServiceUnavailable, nil)

	dlt := envelope.DLT(envelope.TopicUsageEvents)
	tp := kafkaops.TopicPartition{Topic: dlt, Partition: 1}
	k := &fakeDeadLetters{records: []kafkaops.DeadLetter{
		{TopicPartition: tp, Offset: 7, Value: []byte(`{"a":1}`), Key: []byte{0xff}, Reason: "bad", Origin: envelope.TopicUsageEvents,
			OriginPartition: 1, OriginOffset: 70, Headers: []kgo.RecordHeader{{Key: kafkarecord.HeaderEventType, Value: []byte("DATA_USAGE")}}},
		{TopicPartition: tp, Offset: 6, Value: []byte("not json"), Origin: envelope.TopicUsageEvents, OriginPartition: 1},
		{TopicPartition: tp, Offset: 5, Value: []byte{0xff, 0xfe}, Origin: "elsewhere", OriginPartition: 0},
	}}
	f = newFixture(t, func(c *Config) { c.DeadLetters = k })
	var l DeadLetterList
	f.call(http.MethodGet, "/admin/dead-letters?limit=2", nil, http.StatusOK, &l)
	if len(l.Records) != 2 || l.NextBefore != dlt+":1:6" {
		t.Fatalf("page 1 %+v", l)
	}
	if r := l.Records[0]; r.PayloadEncoding != "json" || r.Key != "/w==" || r.EventType != "DATA_USAGE" || r.OriginOffset != 70 || r.Replayed != nil {
		t.Fatalf("record %+v", r)
	}
	if l.Records[1].PayloadEncoding != "text" {
		t.Fatalf("record %+v", l.Records[1])
	}
	before := l.NextBefore
	l = DeadLetterList{}
	f.call(http.MethodGet, "/admin/dead-letters?before="+before, nil, http.StatusOK, &l)
	if len(l.Records) != 1 || l.Records[0].PayloadEncoding != "base64" || l.NextBefore != "" {
		t.Fatalf("page 2 %+v", l)
	}
	for _, bad := range []string{"x", "usage-events:1:1", dlt + ":-1:1", dlt + ":1"} {
		f.call(http.MethodGet, "/admin/dead-letters?before="+bad, nil, http.StatusUnprocessableEntity, nil)
	}

	sel := DeadLetterSelection{Records: []DeadLetterRecord{{Topic: dlt, Partition: 1, Offset: 7}, {Topic: dlt, Partition: 1, Offset: 7},
		{Topic: dlt, Partition: 1, Offset: 9}, {Topic: dlt, Partition: 1, Offset: 5}}}
	var rep DeadLetterReplayReport
	f.call(http.MethodPost, "/admin/dead-letters/replay", sel, http.StatusOK, &rep)
	got := []string{}
	for _, r := range rep.Results {
		got = append(got, r.Status)
	}
	if fmt.Sprint(got) != "[replayed already-replayed not-found failed]" || rep.Replayed != 1 || rep.AlreadyReplayed != 1 || rep.Failed != 2 ||
		len(k.replayed) != 1 || rep.Results[0].Replayed.By != adminID {
		t.Fatalf("replay %+v (%d produced)", rep, len(k.replayed))
	}
	f.call(http.MethodGet, "/admin/dead-letters?limit=1", nil, http.StatusOK, &l)
	if l.Records[0].Replayed == nil || l.Records[0].Replayed.By != adminID {
		t.Fatalf("replayed record %+v", l.Records[0])
	}
	k.fail = true
	f.call(http.MethodGet, "/admin/dead-letters", nil, http.StatusServiceUnavailable, nil)
}

// fakeStats answers the operations view's Kafka questions, or fails.
type fakeStats struct{ fail bool }

func (s fakeStats) Lag(_ context.Context, groups ...string) (map[string]map[string]int64, error) {
	if s.fail {
		return nil, errors.New("broker down")
	}
	out := map[string]map[string]int64{}
	for i, g := range groups {
		out[g] = map[string]int64{envelope.TopicUsageEvents: int64(i + 1)}
	}
	return out, nil
}

func (s fakeStats) Records(context.Context, ...string) (map[string]int64, error) {
	return map[string]int64{envelope.DLT(envelope.TopicUsageEvents): 3}, nil
}

// TestOperations: rates over two samples of a registry, Kafka's figures,
// and a source or Kafka that fails is reported, not fatal.
func TestOperations(t *testing.T) {
	reg := prometheus.NewRegistry()
	dec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dpcs_decisions_total"}, []string{"decision"})
	recs := prometheus.NewCounter(prometheus.CounterOpts{Name: "dpcs_processor_records_total"})
	stale := prometheus.NewGauge(prometheus.GaugeOpts{Name: "dpcs_redis_state_stale"})
	reg.MustRegister(dec, recs, stale)
	stats := &fakeStats{}
	gone := NewMetricsScraper("http://127.0.0.1:1/metrics", nil)
	f := newFixture(t, func(c *Config) {
		c.OperationsMetrics, c.KafkaStats = []prometheus.Gatherer{reg, gone}, stats
	})
	var v OperationsView
	f.call(http.MethodGet, "/admin/operations", nil, http.StatusOK, &v)
	if v.WindowSeconds != 0 || v.Kafka != "ok" || v.ProcessorLag[envelope.TopicUsageEvents] != 1 || v.DeadLetters[envelope.DLT(envelope.TopicUsageEvents)] != 3 ||
		v.RedisStale == nil || *v.RedisStale || len(v.Sources) != 2 || !v.Sources[0].OK || v.Sources[1].OK || v.Sources[1].Error == "" {
		t.Fatalf("first view %+v", v)
	}
	dec.WithLabelValues("ALLOWED").Add(120)
	recs.Add(60)
	f.now = f.now.Add(time.Minute)
	stats.fail = true
	f.call(http.MethodGet, "/admin/operations", nil, http.StatusOK, &v)
	if v.WindowSeconds != 60 || v.DecisionsPerSecond["ALLOWED"] != 2 || v.TotalPerSecond != 2 || v.RecordsPerSecond != 1 || v.Kafka != "unavailable" {
		t.Fatalf("second view %+v", v)
	}
}
