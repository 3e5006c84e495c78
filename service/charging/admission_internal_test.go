package charging

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// fairHandler is the routes' front (authentication and admission) with a
// mux whose every request signals in and waits for gate.
type fairHandler struct {
	h       *handler
	in      chan string
	gate    chan struct{}
	refused chan bool // OnCongested's share
}

func newFairHandler(maxInFlight int) *fairHandler {
	f := &fairHandler{in: make(chan string, 8), gate: make(chan struct{}), refused: make(chan bool, 8)}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		f.in <- r.RemoteAddr
		<-f.gate
		w.WriteHeader(http.StatusNoContent)
	})
	f.h = &handler{cfg: HandlerConfig{OnCongested: func(share bool) { f.refused <- share }},
		keys: [][sha256.Size]byte{sha256.Sum256([]byte("tok"))}, mux: mux,
		admission: &admission{max: maxInFlight, by: map[string]int{}, wants: map[string]time.Time{}}}
	return f
}

// serve serves a request from addr to path in the background; its answer
// comes on the channel returned.
func (f *fairHandler) serve(addr, path string) chan *httptest.ResponseRecorder {
	done := make(chan *httptest.ResponseRecorder, 1)
	r := httptest.NewRequest(http.MethodPost, BasePath+path, strings.NewReader("{}"))
	r.RemoteAddr = addr
	r.Header.Set("Authorization", "Bearer tok")
	go func() {
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, r)
		done <- w
	}()
	return done
}

func (f *fairHandler) admitted(t *testing.T) {
	t.Helper()
	select {
	case <-f.in:
	case <-time.After(10 * time.Second):
		t.Fatal("no request admitted")
	}
}

func (f *fairHandler) refusal(t *testing.T, answer chan *httptest.ResponseRecorder, share bool) {
	t.Helper()
	select {
	case w := <-answer:
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), CauseNFCongestion) || w.Header().Get("Retry-After") == "" ||
			strings.Contains(w.Body.String(), "fair share") != share {
			t.Errorf("refusal: %d %s (Retry-After %q), want share %v", w.Code, w.Body, w.Header().Get("Retry-After"), share)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not refused")
	}
	if got := <-f.refused; got != share {
		t.Errorf("OnCongested(%v), want %v", got, share)
	}
}

// Overload control is fair between consumers: a lone SMF may take every
// slot; another SMF refused meanwhile makes it give way to its fair share
// (its next request is refused for it, releases excepted), and the other
// SMF's retry finds room.
func TestFairShareOfTheSlots(t *testing.T) {
	f := newFairHandler(2)
	const smfA, smfB = "10.0.0.1:40000", "10.0.0.2:40000"
	a1, a2 := f.serve(smfA, "/chargingdata"), f.serve(smfA, "/chargingdata")
	f.admitted(t)
	f.admitted(t) // a lone SMF takes every slot
	f.refusal(t, f.serve(smfB, "/chargingdata"), false)
	f.refusal(t, f.serve("10.0.0.1:40001", "/chargingdata"), false) // the same SMF on another connection
	f.gate <- struct{}{}
	rest := a2 // A's request still in flight
	select {
	case <-a1:
	case <-a2:
		rest = a1
	case <-time.After(10 * time.Second):
		t.Fatal("the request let through never answered")
	}
	// One slot free; B wants a share: A has its share (1 of 2).
	f.refusal(t, f.serve(smfA, "/chargingdata/r1/update"), true)
	release := f.serve(smfA, "/chargingdata/r1/release") // past its share: it frees what it holds
	f.admitted(t)
	f.refusal(t, f.serve(smfB, "/chargingdata"), false) // every slot taken again
	f.gate <- struct{}{}
	f.gate <- struct{}{}
	<-release
	<-rest
	b := f.serve(smfB, "/chargingdata") // B's retry
	f.admitted(t)
	close(f.gate)
	if w := <-b; w.Code != http.StatusNoContent {
		t.Errorf("B's retry: %d %s", w.Code, w.Body)
	}
	if f.h.admission.total != 0 || len(f.h.admission.by) != 0 {
		t.Errorf("after every request ended: %d in flight, %v", f.h.admission.total, f.h.admission.by)
	}
}

// The admission's bounds, over random requests of random consumers
// beginning and ending: never more than max in flight; a consumer alone
// (no other in flight or refused lately) is refused only when every slot
// is taken; a request is refused for its share only when its consumer
// holds at least max over the consumers in flight or wanting, rounded up;
// the counts always add up.
func TestAdmissionBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := &admission{max: rapid.IntRange(1, 8).Draw(t, "max"), by: map[string]int{}, wants: map[string]time.Time{}}
		var flight []string
		for range rapid.IntRange(1, 100).Draw(t, "steps") {
			if len(flight) > 0 && rapid.Bool().Draw(t, "end") {
				i := rapid.IntRange(0, len(flight)-1).Draw(t, "which")
				a.done(flight[i])
				flight = append(flight[:i], flight[i+1:]...)
			} else {
				c := fmt.Sprint(rapid.IntRange(0, 3).Draw(t, "consumer"))
				release := rapid.Bool().Draw(t, "release")
				n, others := a.by[c], len(a.by)+len(a.wants)
				if n > 0 {
					others--
				}
				if _, wanting := a.wants[c]; wanting {
					others--
				}
				full := a.total >= a.max
				refused, share := a.take(c, release)
				switch {
				case refused && !share && !full:
					t.Fatalf("refused %s as full with %d of %d in flight", c, a.total, a.max)
				case refused && share && (release || n == 0 || n < (a.max+others)/(others+1)):
					t.Fatalf("refused %s for its share holding %d of %d with %d others (release %v)", c, n, a.max, others, release)
				case refused && others == 0 && !full:
					t.Fatalf("refused %s alone with %d of %d in flight", c, a.total, a.max)
				case !refused && full:
					t.Fatalf("admitted %s past %d", c, a.max)
				case !refused:
					flight = append(flight, c)
				}
			}
			sum := 0
			for _, n := range a.by {
				sum += n
			}
			if a.total != len(flight) || sum != a.total || a.total > a.max {
				t.Fatalf("%d in flight counted %d (by consumer %v), max %d", len(flight), a.total, a.by, a.max)
			}
		}
	})
}

// A consumer is its client certificate, else the NF instance its NRF
// token names, else its address (whatever its port: one SMF's
// connections are one consumer).
func TestConsumerIdentity(t *testing.T) {
	h := &handler{cfg: HandlerConfig{ClientCertificates: true}, keys: [][sha256.Size]byte{sha256.Sum256([]byte("tok"))}}
	for name, tc := range map[string]struct {
		remote string
		tls    *tls.ConnectionState
		want   string
	}{
		"IPv4": {remote: "10.0.0.1:40000", want: "10.0.0.1"},
		"IPv6": {remote: "[fd00::1]:40000", want: "[fd00::1]"},
		"certificate": {remote: "10.0.0.1:40000", want: "cert:sig-1",
			tls: &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Signature: []byte("sig-1")}}}}},
	} {
		r := httptest.NewRequest(http.MethodPost, BasePath+"/chargingdata", nil)
		r.RemoteAddr, r.TLS = tc.remote, tc.tls
		r.Header.Set("Authorization", "Bearer tok")
		if got, ok := h.authenticate(httptest.NewRecorder(), r); !ok || got != tc.want {
			t.Errorf("%s: %q %v, want %q", name, got, ok, tc.want)
		}
	}
}
