package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/family"
	"github.com/dabom/dpcs/service/judge"
)

// fixedMarks is a judge.MarkStore naming one generation and no marks.
type fixedMarks string

func (g fixedMarks) Generation(context.Context) (string, error)         { return string(g), nil }
func (fixedMarks) Forget()                                              {}
func (fixedMarks) Floors(context.Context, string) ([]quota.Mark, error) { return nil, nil }
func (fixedMarks) RecordMark(context.Context, string, quota.Mark) error { return nil }

// readSpy is the door with its reads counted: the API's QuotaReader and the
// family service's door.
type readSpy struct {
	*judge.State
	mu            sync.Mutex
	reads, usable int // reads, and reads that returned a state (no error)
}

func (s *readSpy) note(err error) {
	s.mu.Lock()
	s.reads++
	if err == nil {
		s.usable++
	}
	s.mu.Unlock()
}

func (s *readSpy) Family(ctx context.Context, fid int64) (quota.FamilyStatus, error) {
	f, err := s.State.Family(ctx, fid)
	s.note(err)
	return f, err
}

func (s *readSpy) Status(ctx context.Context, fid, cid int64) (quota.MemberStatus, error) {
	st, err := s.State.Status(ctx, fid, cid)
	s.note(err)
	return st, err
}

func (s *readSpy) take() (reads, usable int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reads, usable, s.reads, s.usable = s.reads, s.usable, 0, 0
	return reads, usable
}

// What the API reads of the quota state is the door's checked reads only
// (doc/architecture.md, "Every decision is made on a checked state"): a new
// method of QuotaReader must be added here, with the check it makes.
func TestQuotaReadsAreChecked(t *testing.T) {
	checked := map[string]string{
		"Family":   "judge.State.Family: the judgements' check after the read",
		"Status":   "judge.State.Status: the judgements' check after the read",
		"Location": "the service zone: not a read of the state",
	}
	rt := reflect.TypeFor[QuotaReader]()
	for i := range rt.NumMethod() {
		if name := rt.Method(i).Name; checked[name] == "" {
			t.Errorf("QuotaReader.%s: not one of the door's checked reads", name)
		}
	}
	for _, m := range []string{"Status"} { // the family service's reads (gifts, requests, policies)
		if _, ok := reflect.TypeFor[family.Door]().MethodByName(m); !ok {
			t.Errorf("family.Door has no %s", m)
		}
	}
}

// Every route is walked with the quota state stale (Redis came back empty,
// no rebuild yet: DPCS_RECOVERY=manual): a route that reads the door gets
// no state from it — every read fails its check — so no answer, a gift's
// "what the giver has left" included, is computed from a state nobody
// checked. It lists the routes that read the door.
func TestEveryRouteReadsACheckedState(t *testing.T) {
	f := newAPIFixture(t)
	// The fixture's API again, on a door that knows the generation (so its
	// reads are checked) with its reads counted.
	door, err := judge.NewState(f.engine, judge.WithMarkStore(fixedMarks("g1")))
	if err != nil {
		t.Fatal(err)
	}
	spy := &readSpy{State: door}
	fam, err := family.New(f.store, spy)
	if err != nil {
		t.Fatal(err)
	}
	f.api, err = New(Config{Store: f.store, State: spy, Family: fam, Hub: f.hub, Inbox: f.inbox,
		Secret: []byte("0123456789abcdef0123456789abcdef"), Clock: f.clock, PingInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(f.api.Handler())
	t.Cleanup(f.srv.Close)
	ctx := context.Background()
	if _, err := f.engine.BeginRebuild(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if err := f.engine.FinishRebuild(ctx, "g1", nil); err != nil {
		t.Fatal(err)
	}
	// The checked state answers: the walk below is not refused for
	// another reason.
	owner, admin := f.token(ownerA), f.token(adminID)
	f.call(http.MethodGet, fmt.Sprintf("/families/%d", famA), owner, nil, http.StatusOK, nil)
	if reads, usable := spy.take(); reads == 0 || usable != reads {
		t.Fatalf("the dashboard on a checked state: %d reads, %d usable", reads, usable)
	}

	f.mr.FlushAll() // Redis came back empty; nobody rebuilt it
	params := map[string]string{"familyId": fmt.Sprint(famA), "customerId": fmt.Sprint(childA), "appId": "com.youtube.app"}
	bodies := map[string]any{
		"POST /families/{familyId}/gifts":                          map[string]any{"fromCustomerId": childA, "toCustomerId": victimA, "amountBytes": mib},
		"PATCH /families/{familyId}/members/{customerId}/policies": map[string]any{"set": map[string]string{}},
	}
	// Reads first, removals last, in a fixed order: a route that changes
	// the family (a member removed) runs after those that read it.
	type route struct {
		method, path string
		op           *huma.Operation
	}
	var routes []route
	eachOperation(f, func(method, path string, op *huma.Operation) { routes = append(routes, route{method, path, op}) })
	rank := map[string]int{http.MethodGet: 0, http.MethodPost: 1, http.MethodPut: 2, http.MethodPatch: 3, http.MethodDelete: 4}
	slices.SortFunc(routes, func(a, b route) int {
		if d := rank[a.method] - rank[b.method]; d != 0 {
			return d
		}
		return strings.Compare(a.path, b.path)
	})
	var readers []string
	for _, rt := range routes {
		method, path, op := rt.method, rt.path, rt.op
		if op.Extensions["x-sse"] != nil || strings.HasSuffix(path, "/stream") || strings.Contains(path, "/events") {
			continue // streams: no decision, and they stay open
		}
		url := path
		for _, p := range op.Parameters {
			if p.In != "path" {
				continue
			}
			v, ok := params[p.Name]
			if !ok {
				v = "1"
			}
			url = strings.ReplaceAll(url, "{"+p.Name+"}", v)
		}
		token := owner
		if strings.HasPrefix(path, "/admin") {
			token = admin
		}
		var body any
		if op.RequestBody != nil {
			body = bodies[method+" "+path]
			if body == nil {
				body = map[string]any{}
			}
		}
		resp, data := f.do(method, url, token, body)
		reads, usable := spy.take()
		if reads > 0 {
			readers = append(readers, method+" "+path)
		}
		if usable > 0 {
			t.Errorf("%s %s: %d reads of the door returned a state nobody checked (answered %d: %.200s)",
				method, path, usable, resp.StatusCode, data)
		}
	}
	slices.Sort(readers)
	t.Logf("routes that read the door (every read refused on the stale state): %s", strings.Join(readers, ", "))
	for _, want := range []string{"GET /families/{familyId}", "GET /families/{familyId}/members/{customerId}/policies",
		"GET /families/{familyId}/members/{customerId}/usage", "POST /families/{familyId}/gifts"} {
		if !slices.Contains(readers, want) {
			t.Errorf("%s did not read the door: the walk did not reach its read", want)
		}
	}
}
