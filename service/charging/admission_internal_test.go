package charging

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
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

// newFairHandler's clock stands still: the waiting never stop waiting,
// however slowly the machine runs the test.
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
		admission: newAdmission(maxInFlight, func() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) })}
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
		status, cause := http.StatusServiceUnavailable, `"cause":"`+CauseNFCongestion+`"`
		if share {
			status, cause = http.StatusTooManyRequests, `"cause":"`+CauseNFCongestionRisk+`"`
		}
		if w.Code != status || !strings.Contains(w.Body.String(), cause) || w.Header().Get("Retry-After") == "" {
			t.Errorf("refusal: %d %s (Retry-After %q), want %d %s", w.Code, w.Body, w.Header().Get("Retry-After"), status, cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not refused")
	}
	if got := <-f.refused; got != share {
		t.Errorf("OnCongested(%v), want %v", got, share)
	}
}

// Overload control is fair between consumers: a lone SMF may take every
// slot; another SMF refused meanwhile has the next free slot kept for it
// (the first SMF's requests are refused meanwhile: 429, a release 503),
// and its retry takes it.
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
	// One slot free, kept for B, which waits.
	f.refusal(t, f.serve(smfA, "/chargingdata/r1/update"), true)
	f.refusal(t, f.serve(smfA, "/chargingdata/r1/release"), false) // not for a share: the slot is B's
	b := f.serve(smfB, "/chargingdata")                            // B's retry
	f.admitted(t)
	// B has its share (1 of 2); A, with one, too: a release is let past it.
	f.refusal(t, f.serve(smfB, "/chargingdata"), false) // every slot taken
	f.gate <- struct{}{}
	f.gate <- struct{}{}
	<-b
	<-rest
	release := f.serve(smfA, "/chargingdata/r1/release")
	f.admitted(t)
	close(f.gate)
	if w := <-release; w.Code != http.StatusNoContent {
		t.Errorf("A's release: %d %s", w.Code, w.Body)
	}
	if f.h.admission.total != 0 || len(f.h.admission.by) != 0 {
		t.Errorf("after every request ended: %d in flight, %v", f.h.admission.total, f.h.admission.by)
	}
}

// No consumer waits for ever: storming consumers that take every slot the
// moment it frees, and one that asks again a second after each refusal,
// which gets in on its first retry; a consumer that stops asking stops
// keeping a slot 2 s later. With max 1, two consumers take turns.
func TestWaitingConsumerGetsIn(t *testing.T) {
	for _, tc := range []struct{ max, stormers int }{{1, 1}, {2, 1}, {4, 2}, {1024, 32}, {1024, 1100}} {
		now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
		a := newAdmission(tc.max, func() time.Time { return now })
		var flight []string
		fill := func() { // the stormers take every slot they may
			for progress := true; progress; {
				progress = false
				for i := range tc.stormers {
					c := fmt.Sprint("storm-", i)
					if refused, _ := a.take(c, false); !refused {
						flight = append(flight, c)
						progress = true
					}
				}
			}
		}
		fill()
		if refused, _ := a.take("polite", false); !refused {
			t.Fatalf("max %d, %d stormers: the polite one got in while every slot was taken", tc.max, tc.stormers)
		}
		got := false
		for round := 0; round < 10 && !got; round++ {
			for range 50 { // the stormers' requests end and they ask again
				if len(flight) == 0 {
					break
				}
				a.done(flight[0])
				flight = flight[1:]
				fill()
			}
			now = now.Add(time.Second)
			got = !first(a.take("polite", false))
			if !got {
				t.Logf("max %d, %d stormers: the polite one refused at its retry %d", tc.max, tc.stormers, round+1)
			}
		}
		if !got {
			t.Errorf("max %d, %d stormers: the polite one never got in", tc.max, tc.stormers)
		}
	}
	// One that stops asking keeps no slot.
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	a := newAdmission(1, func() time.Time { return now })
	a.take("a", false)
	a.take("b", false) // refused: b waits
	a.done("a")
	if refused, _ := a.take("a", false); !refused {
		t.Error("the slot kept for b was taken within 2 s")
	}
	now = now.Add(wanting + time.Millisecond)
	if refused, _ := a.take("a", false); refused {
		t.Error("the slot kept for b, which stopped asking, was still kept")
	}
}

func first(refused, _ bool) bool { return refused }

// The admission's bounds, over random requests of random consumers
// beginning and ending and time passing, against a model of who waits
// (refused with nothing in flight, asking again within 2 s): never more
// than max in flight; a waiting consumer is let in when more slots are
// free than consumers wait before it, and refused otherwise; one alone is
// refused only when every slot is taken; with more slots free than
// consumers waiting, one is refused only for its share (a release never),
// holding at least max over the consumers in flight or waiting; the
// counts always add up.
func TestAdmissionBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
		a := newAdmission(rapid.IntRange(1, 8).Draw(t, "max"), func() time.Time { return now })
		type wait struct{ since, last time.Time }
		waits := map[string]wait{} // the model's
		var flight []string
		for range rapid.IntRange(1, 100).Draw(t, "steps") {
			switch rapid.IntRange(0, 2).Draw(t, "what") {
			case 0:
				if len(flight) > 0 {
					i := rapid.IntRange(0, len(flight)-1).Draw(t, "which")
					a.done(flight[i])
					flight = append(flight[:i], flight[i+1:]...)
				}
				continue
			case 1:
				now = now.Add(time.Duration(rapid.IntRange(0, 3000).Draw(t, "ms")) * time.Millisecond)
				continue
			}
			c := fmt.Sprint(rapid.IntRange(0, 3).Draw(t, "consumer"))
			release := rapid.Bool().Draw(t, "release")
			for w, at := range waits {
				if now.Sub(at.last) > wanting {
					delete(waits, w)
				}
			}
			n, free := a.by[c], a.max-a.total
			mine, waiting := waits[c]
			ahead, alone := 0, true
			for w, o := range waits {
				if w != c {
					alone = false
					if o.since.Before(mine.since) || (o.since.Equal(mine.since) && w < c) {
						ahead++
					}
				}
			}
			for o := range a.by {
				if o != c {
					alone = false
				}
			}
			consumers := len(a.by) + len(waits)
			if n == 0 && !waiting {
				consumers++ // itself, about to be counted
			}
			refused, share := a.take(c, release)
			switch {
			case !refused && free == 0:
				t.Fatalf("admitted %s past %d", c, a.max)
			case waiting && refused != (free <= ahead):
				t.Fatalf("%s waiting, %d waiting before it, %d free: refused %v", c, ahead, free, refused)
			case refused && free > 0 && alone:
				t.Fatalf("refused %s alone with %d slots free", c, free)
			case refused && share && (release || n == 0):
				t.Fatalf("refused %s for a share holding %d (release %v)", c, n, release)
			case !waiting && refused && free > len(waits) && (!share || release || n < max(1, a.max/(len(a.by)+len(waits)))):
				t.Fatalf("refused %s (share %v) holding %d of %d, %d consumers, release %v, %d free, %d waiting",
					c, share, n, a.max, consumers, release, free, len(waits))
			case !waiting && !refused && free <= len(waits):
				t.Fatalf("admitted %s into a slot kept for the %d waiting", c, len(waits))
			}
			switch {
			case !refused:
				delete(waits, c)
				flight = append(flight, c)
			case waiting:
				mine.last = now
				waits[c] = mine
			case n == 0 && free <= len(waits):
				waits[c] = wait{since: now, last: now}
			}
			sum := 0
			for _, n := range a.by {
				sum += n
			}
			if a.total != len(flight) || sum != a.total || a.total > a.max || len(a.wants) != len(waits) {
				t.Fatalf("%d in flight counted %d (by consumer %v), max %d; %d waiting, model %d", len(flight), a.total, a.by, a.max, len(a.wants), len(waits))
			}
		}
	})
}

// A consumer is the NF instance its NRF token names (also on a verified
// connection: an SCP's carries many SMFs), else its client certificate,
// else its address (whatever its port: one SMF's connections are one
// consumer).
func TestConsumerIdentity(t *testing.T) {
	nrf, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h := &handler{cfg: HandlerConfig{ClientCertificates: true, AccessTokens: &AccessTokens{Keys: []crypto.PublicKey{&nrf.PublicKey}}},
		keys: [][sha256.Size]byte{sha256.Sum256([]byte("tok"))}}
	seg := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	input := seg(map[string]string{"alg": "ES256"}) + "." + seg(map[string]any{"sub": "smf-7", "aud": "CHF", "scope": Scope,
		"exp": time.Now().Add(time.Hour).Unix()})
	d := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, nrf, d[:])
	if err != nil {
		t.Fatal(err)
	}
	token := input + "." + base64.RawURLEncoding.EncodeToString(append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...))
	verified := &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Signature: []byte("sig-1")}}}}
	for name, tc := range map[string]struct {
		remote, token string
		tls           *tls.ConnectionState
		want          string
	}{
		"NRF token":                       {remote: "10.0.0.1:40000", token: token, want: "nf:smf-7"},
		"NRF token on a certificate":      {remote: "10.0.0.1:40000", token: token, tls: verified, want: "nf:smf-7"},
		"a static token on a certificate": {remote: "10.0.0.1:40000", tls: verified, want: "cert:sig-1"},
		"IPv4":                            {remote: "10.0.0.1:40000", want: "10.0.0.1"},
		"IPv6":                            {remote: "[fd00::1]:40000", want: "fd00::/64"},
		"IPv4 in IPv6":                    {remote: "[::ffff:10.0.0.1]:40000", want: "10.0.0.1"},
		"unix socket":                     {remote: "@", want: "@"},
	} {
		r := httptest.NewRequest(http.MethodPost, BasePath+"/chargingdata", nil)
		r.RemoteAddr, r.TLS = tc.remote, tc.tls
		if tc.token == "" {
			tc.token = "tok"
		}
		r.Header.Set("Authorization", "Bearer "+tc.token)
		if got, ok := h.authenticate(httptest.NewRecorder(), r); !ok || got != tc.want {
			t.Errorf("%s: %q %v, want %q", name, got, ok, tc.want)
		}
	}
}

// What the admission adds to a request: one consumer's requests taken and
// ended from every core at once, none waiting.
func BenchmarkAdmission(b *testing.B) {
	a := newAdmission(1024, time.Now)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if refused, _ := a.take("10.0.0.1", false); !refused {
				a.done("10.0.0.1")
			}
		}
	})
}
