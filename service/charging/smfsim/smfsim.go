// Package smfsim simulates SMFs against DPCS's charging interface
// (service/charging): PDU sessions, each for a subscriber, that open a
// charging session (create), use their grants at their own rate, report
// and ask for more when what is left reaches the volumeQuotaThreshold (or
// the grant's validity ends, or a REAUTHORIZATION arrives), and release at
// their end — over HTTP/2 cleartext, as an SMF's SBI client speaks. The
// all-in-one runs it beside the simulated event traffic
// (DPCS_SIMULATOR_SESSIONS); doc/simulator.md, "Sessions".
//
//	sim, err := smfsim.New(smfsim.Config{URL: "http://127.0.0.1:8090", Token: tok,
//		Subscribers: []string{"msisdn-821000010000", …}, Sessions: 20, NotifyAddr: "127.0.0.1:0"})
//	sim.Start()
//	defer sim.Close(ctx) // releases every open session
package smfsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dabom/dpcs/service/charging"
)

// Config says where the simulated SMFs send and for whom.
type Config struct {
	// URL is the charging interface's address, http://host:port (its
	// routes are under charging.BasePath).
	URL string
	// Token is a charging credential (DPCS_CHARGING_TOKENS).
	Token string
	// Subscribers are the subscriberIdentifiers sessions are opened for
	// (msisdn-… or imsi-…), drawn at random.
	Subscribers []string
	// Sessions is how many PDU sessions run at once; each that ends is
	// followed by a new one.
	Sessions int
	// NotifyAddr is where the SMFs listen for notifications
	// (REAUTHORIZATION), host:port; "" for nowhere (no notifyUri sent).
	NotifyAddr string
	// Seed makes the sessions' draws repeatable.
	Seed uint64
	// Rate is the range of a session's throughput in bytes per second.
	// Default 256 KiB/s to 4 MiB/s.
	Rate [2]int64
	// Lifetime is the range of a session's length. Default 20 s to 3 min.
	Lifetime [2]time.Duration
	// RatingGroups are the rating groups a session uses one or two of.
	// Default 10 (video), 20 (games), 30 (social), 50 (web) and 1 (any).
	RatingGroups []uint32
	// Logger receives failures. Default: discard.
	Logger *slog.Logger
	// Client sends the requests. Default: HTTP/2 cleartext with prior
	// knowledge, 10 s a request.
	Client *http.Client
}

// Stats counts what the simulated SMFs did.
type Stats struct {
	Creates, Updates, Releases uint64
	// Refused counts rating groups answered with another resultCode than
	// SUCCESS, Final those answered with their last units.
	Refused, Final uint64
	Errors         uint64 // requests that failed or were refused whole
	Notifications  uint64 // REAUTHORIZATIONs received
	Aborts         uint64 // ABORT_CHARGINGs received: the CHF closed the session
	Open           int64  // sessions open now
	GrantedBytes   uint64
	UsedBytes      uint64
}

// Simulator runs the sessions; Start starts them, Close stops them.
type Simulator struct {
	cfg    Config
	log    *slog.Logger
	client *http.Client
	rng    *rand.Rand
	rngMu  sync.Mutex

	notifyURL string
	srv       *http.Server
	ln        net.Listener

	mu      sync.Mutex
	waiting map[string]chan struct{} // ref → its REAUTHORIZATION signal
	aborted map[string]bool          // refs the CHF closed (ABORT_CHARGING)

	stats struct {
		creates, updates, releases, refused, final, errors, notifications, aborts, granted, used atomic.Uint64
		open                                                                                     atomic.Int64
	}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started atomic.Bool
}

// New checks cfg and returns a simulator; nothing runs until Start.
func New(cfg Config) (*Simulator, error) {
	switch {
	case cfg.URL == "" || cfg.Token == "":
		return nil, errors.New("smfsim: URL and Token are required")
	case len(cfg.Subscribers) == 0:
		return nil, errors.New("smfsim: no subscribers")
	case cfg.Sessions < 1:
		return nil, errors.New("smfsim: at least one session")
	}
	if cfg.Rate == [2]int64{} {
		cfg.Rate = [2]int64{256 << 10, 4 << 20}
	}
	if cfg.Lifetime == [2]time.Duration{} {
		cfg.Lifetime = [2]time.Duration{20 * time.Second, 3 * time.Minute}
	}
	if cfg.Rate[0] < 1 || cfg.Rate[1] < cfg.Rate[0] || cfg.Lifetime[0] <= 0 || cfg.Lifetime[1] < cfg.Lifetime[0] {
		return nil, fmt.Errorf("smfsim: bad rate %v or lifetime %v", cfg.Rate, cfg.Lifetime)
	}
	if len(cfg.RatingGroups) == 0 {
		cfg.RatingGroups = []uint32{10, 20, 30, 50, 1}
	}
	s := &Simulator{cfg: cfg, log: cfg.Logger, client: cfg.Client, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed)),
		waiting: map[string]chan struct{}{}, aborted: map[string]bool{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.client == nil {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		s.client = &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
	}
	return s, nil
}

// Start starts the notification listener and the sessions.
func (s *Simulator) Start() error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("smfsim: started twice")
	}
	if s.cfg.NotifyAddr != "" {
		ln, err := net.Listen("tcp", s.cfg.NotifyAddr)
		if err != nil {
			return fmt.Errorf("smfsim: notification listener: %w", err)
		}
		s.ln = ln
		s.notifyURL = "http://" + ln.Addr().String() + "/nsmf-callback/v1/charging/"
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		s.srv = &http.Server{Handler: http.HandlerFunc(s.notified), Protocols: &p, ReadHeaderTimeout: 5 * time.Second}
		s.wg.Go(func() {
			if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("smfsim: notification listener", "err", err)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for range s.cfg.Sessions {
		s.wg.Go(func() { s.sessions(ctx) })
	}
	return nil
}

// Close ends every session (each releases what it holds, within ctx) and
// the listener.
func (s *Simulator) Close(ctx context.Context) error {
	if !s.started.Load() {
		return nil
	}
	s.cancel()
	var err error
	if s.srv != nil {
		err = s.srv.Shutdown(ctx)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return err
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
}

// Stats returns the counts so far.
func (s *Simulator) Stats() Stats {
	return Stats{Creates: s.stats.creates.Load(), Updates: s.stats.updates.Load(), Releases: s.stats.releases.Load(),
		Refused: s.stats.refused.Load(), Final: s.stats.final.Load(), Errors: s.stats.errors.Load(),
		Notifications: s.stats.notifications.Load(), Aborts: s.stats.aborts.Load(), Open: s.stats.open.Load(), GrantedBytes: s.stats.granted.Load(),
		UsedBytes: s.stats.used.Load()}
}

// NotifyURL is where the SMFs take notifications ("" without a listener).
func (s *Simulator) NotifyURL() string { return s.notifyURL }

// notified takes a ChargingNotifyRequest for the session its path names.
func (s *Simulator) notified(w http.ResponseWriter, r *http.Request) {
	ref := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	var n charging.ChargingNotifyRequest
	if r.Method != http.MethodPost || json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&n) != nil || n.NotificationType == "" {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	abort := n.NotificationType == charging.NotificationAbortCharging
	s.mu.Lock()
	c, ok := s.waiting[ref]
	if ok && abort {
		s.aborted[ref] = true
	}
	s.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusNotFound) // no such session (any more)
		return
	}
	if abort {
		s.stats.aborts.Add(1)
	} else {
		s.stats.notifications.Add(1)
	}
	select {
	case c <- struct{}{}:
	default:
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Simulator) intn(lo, hi int64) int64 {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	if hi <= lo {
		return lo
	}
	return lo + s.rng.Int64N(hi-lo+1)
}

// sessions runs PDU sessions one after another until ctx ends; after one
// that failed or was granted nothing it pauses 1 to 5 s, as a user whose
// data stopped would.
func (s *Simulator) sessions(ctx context.Context) {
	for ctx.Err() == nil {
		granted, err := s.session(ctx)
		if err != nil && ctx.Err() == nil {
			s.stats.errors.Add(1)
			s.log.Debug("smfsim: session ended by an error", "err", err)
		}
		if err != nil || !granted {
			wait(ctx, time.Duration(s.intn(int64(time.Second), int64(5*time.Second))))
		}
	}
}

func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// grant is what one rating group holds.
type grant struct {
	rg        uint32
	granted   int64
	threshold int64
	used      int64 // of granted, not yet reported
	final     bool
	validTill time.Time
	rate      int64 // bytes per second
}

// session is one PDU session: create, updates, release. It reports
// whether the create granted anything.
func (s *Simulator) session(ctx context.Context) (bool, error) {
	sub := s.cfg.Subscribers[s.intn(0, int64(len(s.cfg.Subscribers)-1))]
	rgs := []uint32{s.cfg.RatingGroups[s.intn(0, int64(len(s.cfg.RatingGroups)-1))]}
	if other := s.cfg.RatingGroups[s.intn(0, int64(len(s.cfg.RatingGroups)-1))]; other != rgs[0] && s.intn(0, 1) == 1 {
		rgs = append(rgs, other)
	}
	pdu := uint8(s.intn(1, 15))
	chargingID := uint32(s.intn(1, 1<<31))
	var seq uint32
	req := s.request(sub, seq)
	req.ChargingID = &chargingID
	req.PDUSessionChargingInformation = &charging.PDUSessionChargingInformation{ChargingID: &chargingID,
		PDUSessionInformation: &charging.PDUSessionInformation{PDUSessionID: &pdu, DNNID: "internet", RATType: "NR"}}
	for _, rg := range rgs {
		req.MultipleUnitUsage = append(req.MultipleUnitUsage, charging.MultipleUnitUsage{RatingGroup: ptr(rg), RequestedUnit: &charging.RequestedUnit{}})
	}
	notify := make(chan struct{}, 1)
	ref := ""
	if s.notifyURL != "" {
		// The ref is not known before the create: the notifyUri names the
		// charging id, under which the session waits.
		ref = fmt.Sprint(chargingID)
		req.NotifyURI = s.notifyURL + ref
		s.mu.Lock()
		s.waiting[ref] = notify
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.waiting, ref)
			delete(s.aborted, ref)
			s.mu.Unlock()
		}()
	}
	// The create too is finished when the simulator stops meanwhile (the
	// session is then released at once), and sent again once if it fails:
	// its charging id makes the retry the same session.
	var resp charging.ChargingDataResponse
	loc, err := s.sendCreate(req, &resp)
	if err != nil {
		return false, err
	}
	s.stats.creates.Add(1)
	s.stats.open.Add(1)
	defer s.stats.open.Add(-1)
	path := loc[strings.Index(loc, charging.BasePath)+len(charging.BasePath):]
	grants := map[uint32]*grant{}
	s.take(resp, grants)
	granted := len(grants) > 0
	end := time.Now().Add(time.Duration(s.intn(int64(s.cfg.Lifetime[0]), int64(s.cfg.Lifetime[1]))))
	last := time.Now()
	for {
		if len(grants) == 0 { // nothing granted (any more): the session ends
			return granted, s.release(path, sub, seq+1, nil)
		}
		next := end
		for _, g := range grants {
			left := g.granted - g.used - g.threshold
			if g.final {
				left = g.granted - g.used
			}
			at := last.Add(time.Duration(max(left, 0) * int64(time.Second) / g.rate))
			if g.granted == 0 { // waiting to ask again
				at = g.validTill
			}
			if g.validTill.Before(at) {
				at = g.validTill
			}
			if at.Before(next) {
				next = at
			}
		}
		reauth := false
		stopped := false
		select {
		case <-ctx.Done():
			stopped = true
		case <-notify:
			s.mu.Lock()
			aborted := s.aborted[ref]
			s.mu.Unlock()
			if aborted { // the CHF closed the session: nothing to release
				return granted, nil
			}
			reauth = true
		case <-time.After(time.Until(next)):
		}
		now := time.Now()
		for _, g := range grants { // the traffic since the last turn, within the grant
			g.used = min(g.granted, g.used+g.rate*int64(now.Sub(last))/int64(time.Second))
		}
		last = now
		seq++
		if stopped || !now.Before(end) {
			return granted, s.release(path, sub, seq, grants)
		}
		upd := s.request(sub, seq)
		var reported uint64
		for _, rg := range rgs {
			g, ok := grants[rg]
			if !ok {
				continue
			}
			u := charging.MultipleUnitUsage{RatingGroup: ptr(rg), UsedUnitContainer: []charging.UsedUnitContainer{{
				TotalVolume: ptr(uint64(g.used)), LocalSequenceNumber: ptr(int64(seq)), Triggers: []charging.Trigger{s.trigger(g, reauth, now)}}}}
			if !g.final || g.used < g.granted {
				u.RequestedUnit = &charging.RequestedUnit{}
			}
			reported += uint64(g.used)
			upd.MultipleUnitUsage = append(upd.MultipleUnitUsage, u)
		}
		// An update in flight is finished even when the simulator stops,
		// and one that fails is sent again as it was (its retry is charged
		// once) before the session gives up.
		resp = charging.ChargingDataResponse{}
		if err := s.send(path+"/update", upd, http.StatusOK, &resp); err != nil {
			return granted, err
		}
		s.stats.used.Add(reported)
		s.stats.updates.Add(1)
		s.take(resp, grants)
	}
}

// trigger is why an update is sent.
func (s *Simulator) trigger(g *grant, reauth bool, now time.Time) charging.Trigger {
	t := charging.Trigger{TriggerType: "QUOTA_THRESHOLD", TriggerCategory: "IMMEDIATE_REPORT"}
	switch {
	case reauth:
		t.TriggerType = "FORCED_REAUTHORISATION"
	case !now.Before(g.validTill):
		t.TriggerType = "VALIDITY_TIME"
	case g.final && g.used >= g.granted:
		t.TriggerType = "FINAL"
	}
	return t
}

// take applies an answer: each rating group's new grant, or its end.
func (s *Simulator) take(resp charging.ChargingDataResponse, grants map[uint32]*grant) {
	for _, u := range resp.MultipleUnitInformation {
		g := grants[u.RatingGroup]
		if g == nil {
			g = &grant{rg: u.RatingGroup, rate: s.intn(s.cfg.Rate[0], s.cfg.Rate[1])}
		}
		var vol int64
		if u.GrantedUnit != nil && u.GrantedUnit.TotalVolume != nil {
			vol = int64(*u.GrantedUnit.TotalVolume)
		}
		if u.ResultCode != "" && u.ResultCode != charging.ResultSuccess || vol == 0 {
			s.stats.refused.Add(1)
			if u.FinalUnitIndication == nil && u.ValidityTime != nil {
				// Crowded out, not final: ask again at validityTime.
				g.granted, g.used, g.final, g.threshold = 0, 0, false, 0
				g.validTill = time.Now().Add(time.Duration(*u.ValidityTime) * time.Second)
				grants[u.RatingGroup] = g
				continue
			}
			delete(grants, u.RatingGroup)
			continue
		}
		s.stats.granted.Add(uint64(vol))
		g.granted, g.used, g.final = vol, 0, u.FinalUnitIndication != nil
		if g.final {
			s.stats.final.Add(1)
		}
		g.threshold = 0
		if u.VolumeQuotaThreshold != nil {
			g.threshold = int64(*u.VolumeQuotaThreshold)
		}
		g.validTill = time.Now().Add(time.Hour)
		if u.ValidityTime != nil {
			g.validTill = time.Now().Add(time.Duration(*u.ValidityTime) * time.Second)
		}
		grants[u.RatingGroup] = g
	}
}

// release reports the last usage and ends the session; it is sent even
// when the simulator is stopping, and sent again once if it fails.
func (s *Simulator) release(path, sub string, seq uint32, grants map[uint32]*grant) error {
	rel := s.request(sub, seq)
	var reported uint64
	for rg, g := range grants {
		rel.MultipleUnitUsage = append(rel.MultipleUnitUsage, charging.MultipleUnitUsage{RatingGroup: ptr(rg),
			UsedUnitContainer: []charging.UsedUnitContainer{{TotalVolume: ptr(uint64(g.used)), LocalSequenceNumber: ptr(int64(seq))}}})
		reported += uint64(g.used)
	}
	if err := s.send(path+"/release", rel, http.StatusNoContent, nil); err != nil {
		return err
	}
	s.stats.used.Add(reported)
	s.stats.releases.Add(1)
	return nil
}

// send posts a step of an open session, whatever the simulator's state,
// within 5 s, and once more (the same invocation) if that fails.
func (s *Simulator) send(route string, body any, want int, out any) error {
	_, err := s.sendLoc(route, body, want, out)
	return err
}

func (s *Simulator) sendCreate(req *charging.ChargingDataRequest, out *charging.ChargingDataResponse) (string, error) {
	return s.sendLoc("/chargingdata", req, http.StatusCreated, out)
}

func (s *Simulator) sendLoc(route string, body any, want int, out any) (string, error) {
	var loc string
	var err error
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		loc, err = s.post(ctx, route, body, want, out)
		cancel()
		if err == nil {
			return loc, nil
		}
	}
	return "", err
}

func (s *Simulator) request(sub string, seq uint32) *charging.ChargingDataRequest {
	now := time.Now().UTC()
	return &charging.ChargingDataRequest{SubscriberIdentifier: sub, InvocationTimeStamp: &now, InvocationSequenceNumber: &seq,
		NfConsumerIdentification: &charging.NFIdentification{NodeFunctionality: "SMF", NFFqdn: "smfsim.dpcs.local"}}
}

// post sends body to the route and decodes the answer into out; it
// returns the Location header. Another status than want is an error naming
// the problem's cause.
func (s *Simulator) post(ctx context.Context, route string, body any, want int, out any) (string, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.URL+charging.BasePath+route, bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.cfg.Token)
	resp, err := s.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != want {
		var p charging.ProblemDetails
		_ = json.Unmarshal(rb, &p)
		return "", fmt.Errorf("smfsim: %s: %d %s: %s", route, resp.StatusCode, p.Cause, p.Detail)
	}
	if out != nil {
		if err := json.Unmarshal(rb, out); err != nil {
			return "", fmt.Errorf("smfsim: %s: %w", route, err)
		}
	}
	return resp.Header.Get("Location"), nil
}

func ptr[T any](v T) *T { return &v }
