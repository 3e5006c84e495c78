package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The grant path: the DPCS server's charging interface (3GPP TS 32.291
// Nchf_ConvergedCharging over HTTP/2 cleartext, doc/wire-format.md
// "Charging (Nchf)") driven as SMFs drive it. Each call is one invocation
// of one PDU session's charging: an update that reports the whole last
// grant as used and asks for the next (a create when the caller holds no
// session, a release when nothing more is granted). Members are the seeded
// ones, named by the IMSI recoverybench provisions (internal/bench/
// recoverybench.IMSI).

// imsi is recoverybench's IMSI of member cid.
func imsi(cid int64) string { return fmt.Sprintf("45099%010d", cid) }

// smfs are the simulated SMFs of the grant steps.
type smfs struct {
	url, token string
	client     *http.Client
	gen        *generator
	grant      int64 // bytes asked for each time
	mu         sync.Mutex
	idle       []*pduSession
	granted    atomic.Int64 // bytes granted over the measured window and before
	// refused counts answers that granted nothing (a pool or a limit used
	// up): the session is released, and a create's is not an error.
	refused atomic.Int64
	// family, when set, is the one family whose members every new session
	// is for (the contention check); otherwise any seeded family's.
	family int64
	nextID atomic.Int64
	run    string
}

// pduSession is one charging data resource an SMF holds.
type pduSession struct {
	ref  string
	seq  int
	held int64
}

func newSMFs(url, token string, gen *generator, inFlight int) *smfs {
	tr := &http.Transport{MaxIdleConnsPerHost: inFlight, IdleConnTimeout: time.Minute}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &smfs{url: url, token: token, gen: gen, client: &http.Client{Transport: tr, Timeout: 10 * time.Second}, run: randomHex(4)}
}

// chargingAnswer is what the load generator reads of a ChargingDataResponse.
type chargingAnswer struct {
	MultipleUnitInformation []struct {
		ResultCode  string `json:"resultCode"`
		GrantedUnit *struct {
			TotalVolume int64 `json:"totalVolume"`
		} `json:"grantedUnit"`
	} `json:"multipleUnitInformation"`
}

// body is a ChargingDataRequest for one rating group (50, web traffic):
// used bytes reported, want bytes asked for (0: none, a release).
func (s *smfs) body(sub string, seq int, used, want int64) string {
	var b strings.Builder
	b.WriteString(`{"nfConsumerIdentification":{"nodeFunctionality":"SMF","nFName":"peers-smf"},"invocationTimeStamp":"`)
	b.WriteString(time.Now().UTC().Format(time.RFC3339Nano))
	b.WriteString(`","invocationSequenceNumber":` + strconv.Itoa(seq))
	if sub != "" {
		b.WriteString(`,"subscriberIdentifier":"` + sub + `"`)
	}
	b.WriteString(`,"multipleUnitUsage":[{"ratingGroup":50`)
	if want > 0 {
		b.WriteString(`,"requestedUnit":{"totalVolume":` + strconv.FormatInt(want, 10) + `}`)
	}
	if used > 0 {
		b.WriteString(`,"usedUnitContainer":[{"localSequenceNumber":` + strconv.Itoa(seq) + `,"totalVolume":` + strconv.FormatInt(used, 10) + `}]`)
	}
	b.WriteString(`}]}`)
	return b.String()
}

// post sends one request and returns its status, Location and answer.
func (s *smfs) post(ctx context.Context, path, body string) (int, string, chargingAnswer, error) {
	var a chargingAnswer
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/nchf-convergedcharging/v3/chargingdata"+path, strings.NewReader(body))
	if err != nil {
		return 0, "", a, err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, "", a, err
	}
	defer resp.Body.Close()
	// The Location in every answer that has one: a create whose body
	// fails is a session to release all the same.
	loc := resp.Header.Get("Location")
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, loc, a, err
	}
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated {
		if err := json.Unmarshal(data, &a); err != nil {
			return resp.StatusCode, loc, a, err
		}
	} else if resp.StatusCode != http.StatusNoContent {
		return resp.StatusCode, loc, a, fmt.Errorf("%s: %d %s", path, resp.StatusCode, data)
	}
	return resp.StatusCode, loc, a, nil
}

// granted reads the rating group's grant of an answer: bytes, and whether
// more may be asked for.
func grantOf(a chargingAnswer) (int64, bool) {
	if len(a.MultipleUnitInformation) != 1 {
		return 0, false
	}
	u := a.MultipleUnitInformation[0]
	if u.ResultCode != "SUCCESS" || u.GrantedUnit == nil {
		return 0, false
	}
	return u.GrantedUnit.TotalVolume, u.GrantedUnit.TotalVolume > 0
}

// call takes one invocation: n is always 1 (a grant step per call). A call
// begun is not cut off at a step's end (its requests ignore the step's
// cancellation; the client's timeout bounds them), and a session whose
// create or update failed is released, so every session the server opened
// is parked or released unless a release fails too (an error, counted):
// the reservations a step leaves are the parked sessions'.
func (s *smfs) call(int) call {
	return func(ctx context.Context, rng *rand.Rand) error {
		if err := ctx.Err(); err != nil { // the step has ended: no new call
			return err
		}
		ctx = context.WithoutCancel(ctx)
		s.mu.Lock()
		var p *pduSession
		if n := len(s.idle); n > 0 {
			p, s.idle = s.idle[n-1], s.idle[:n-1]
		}
		s.mu.Unlock()
		if p == nil {
			_, cid := s.gen.member(rng)
			if s.family > 0 {
				cid = s.family*10 + 1 + rng.Int64N(4)
			}
			status, loc, a, err := s.post(ctx, "", s.body("imsi-"+imsi(cid), 0, 0, s.grant))
			ref := loc[strings.LastIndexByte(loc, '/')+1:]
			if err == nil && (status != http.StatusCreated || loc == "") {
				err = fmt.Errorf("create: %d, Location %q", status, loc)
			}
			if err != nil {
				if status == http.StatusCreated && ref != "" {
					s.release(ctx, ref, 1)
				}
				return err
			}
			g, ok := grantOf(a)
			s.granted.Add(g)
			if !ok { // nothing granted: the session is opened, and ended
				s.refused.Add(1)
				return s.release(ctx, ref, 1)
			}
			s.park(&pduSession{ref: ref, held: g})
			return nil
		}
		p.seq++
		_, _, a, err := s.post(ctx, "/"+p.ref+"/update", s.body("", p.seq, p.held, s.grant))
		if err != nil {
			// Whether or not the server took the update, the session ends.
			p.seq++
			s.release(ctx, p.ref, p.seq)
			return err
		}
		g, ok := grantOf(a)
		s.granted.Add(g)
		if !ok { // the family's pool or a limit is used up: end the session
			s.refused.Add(1)
			p.seq++
			if err := s.release(ctx, p.ref, p.seq); err != nil {
				return err
			}
			return nil
		}
		p.held = g
		s.park(p)
		return nil
	}
}

// release ends session ref with invocation seq, reporting nothing used:
// what it holds goes back to the pool.
func (s *smfs) release(ctx context.Context, ref string, seq int) error {
	_, _, _, err := s.post(ctx, "/"+ref+"/release", s.body("", seq, 0, 0))
	return err
}

// parked is how many sessions are parked (open, between calls).
func (s *smfs) parked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.idle)
}

func (s *smfs) park(p *pduSession) {
	s.mu.Lock()
	s.idle = append(s.idle, p)
	s.mu.Unlock()
}

// releaseAll releases every session held (between steps and at the end):
// what they hold goes back to the pools.
func (s *smfs) releaseAll(ctx context.Context) error {
	s.mu.Lock()
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	var first error
	for _, p := range idle {
		p.seq++
		if err := s.release(ctx, p.ref, p.seq); err != nil && first == nil {
			first = err
		}
	}
	return first
}
