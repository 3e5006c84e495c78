package charging

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/store"
)

// Charger takes grant steps: reserves, charges and releases bytes of a
// family's pool and a member's limits for each GrantOp, and answers each
// with a GrantResult, in order. The door (service/judge) implements it with
// the promise of POST /decisions: a step is judged on a trusted state,
// recorded (Kafka acknowledged or spooled to SQL) before it is answered, and
// an error leaves no charge. It must:
//
//   - dedupe by GrantOp.ID: a step taken before is answered with its stored
//     result (Duplicate), nothing reserved or charged again;
//   - keep at most one reservation per GrantOp.GrantID, replaced by each
//     step's grant and returned by a release (Release: charge Used, grant
//     nothing);
//   - answer a release of a GrantID it holds nothing for with nothing
//     charged beyond Used and no error (the sweep releases what a session
//     recorded it would ask for, whether or not the ask was made).
type Charger interface {
	Charge(ctx context.Context, ops []quota.GrantOp) ([]quota.GrantResult, error)
}

// Sessions is the SQL the service keeps its sessions in and finds
// subscribers with (*store.Store).
type Sessions interface {
	OpenChargingSession(ctx context.Context, c store.ChargingSession) (store.ChargingSession, bool, error)
	ChargingSession(ctx context.Context, ref string) (store.ChargingSession, error)
	SetChargingGrants(ctx context.Context, ref string, seq int64, grants []store.ChargingGrant) (bool, error)
	SetChargingNotifyURI(ctx context.Context, ref string, seq int64, uri string) (bool, error)
	RecordChargingSteps(ctx context.Context, steps []store.ChargingStepOn) ([]bool, error)
	ExpiredChargingSessions(ctx context.Context, now time.Time, limit int) ([]store.ChargingSession, error)
	BeginClosingChargingSession(ctx context.Context, ref string, seq int64) (bool, error)
	FinishClosingChargingSession(ctx context.Context, ref string) error
	PurgeChargingSessions(ctx context.Context, before time.Time, limit int) (int64, error)
	LiveChargingSessions(ctx context.Context, fid, mid int64) ([]store.ChargingSession, error)
	OpenChargingSessionsAfter(ctx context.Context, after string, limit int) ([]store.ChargingSession, error)
	MemberByIMSI(ctx context.Context, imsi string) (store.Member, error)
	MemberByMSISDN(ctx context.Context, msisdn string) (store.Member, error)
}

var _ Sessions = (*store.Store)(nil)

// Service is DPCS as a charging function: the use cases behind the Nchf
// routes (Create, Update, Release), the REAUTHORIZATION notifications
// (Reauthorize) and the sweep of sessions the SMF lost. Close stops it.
type Service struct {
	charger   Charger
	sessions  Sessions
	o         options
	locks     [64]chan struct{} // each holds one token: lock
	cache     sessionCache
	records   chan *recording
	recDone   chan struct{}
	notifier  *notifier
	changes   changes
	catalog   catalogChanges
	sweepDone chan struct{}
	stop      context.CancelFunc
	closeOnce sync.Once
}

// New returns a service taking grant steps through charger and keeping
// sessions in sessions; it starts the sweep (WithSweep).
func New(charger Charger, sessions Sessions, opts ...Option) (*Service, error) {
	if charger == nil || sessions == nil {
		return nil, errors.New("charging: a Charger and Sessions are required")
	}
	o := defaults()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.redirectURL != "" {
		u, err := url.Parse(o.redirectURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("charging: redirect %q: want an absolute http or https URL", o.redirectURL)
		}
	}
	s := &Service{charger: charger, sessions: sessions, o: o, sweepDone: make(chan struct{}),
		cache:   sessionCache{max: o.cacheSize, m: map[string]store.ChargingSession{}},
		records: make(chan *recording), recDone: make(chan struct{}),
		changes: changes{pending: map[int64]map[int64]bool{}, reclaim: map[int64]map[string]bool{},
			reidentify: map[int64]map[int64]bool{}, wake: make(chan struct{}, 1),
			done: make(chan struct{})},
		catalog: catalogChanges{now: map[uint32]bool{}, later: map[uint32]askLater{}, wake: make(chan struct{}, 1), done: make(chan struct{})}}
	for i := range s.locks {
		s.locks[i] = make(chan struct{}, 1)
	}
	s.notifier = newNotifier(o)
	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go s.sweepLoop(ctx)
	go s.changeLoop(ctx)
	go s.catalogLoop(ctx)
	go s.recordLoop(ctx)
	return s, nil
}

// Close stops the sweep and the change worker (the changes it was given
// are looked up first) and the notifications: those queued are still tried
// until ctx ends.
func (s *Service) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		s.stop()
		<-s.sweepDone
		<-s.changes.done
		<-s.catalog.done
		<-s.recDone
		err = s.notifier.close(ctx)
	})
	return err
}

// lock serialises the steps of one session in this process (another
// process's are refused by the store's conditional writes); waiting for it
// ends with ctx, so a request answers by itself at its deadline (NewServer
// runs the routes without http.TimeoutHandler).
func (s *Service) lock(ctx context.Context, ref string) (func(), error) {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(ref); i++ {
		h = (h ^ uint32(ref[i])) * 16777619
	}
	l := s.locks[h%uint32(len(s.locks))]
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Every error of Create, Update and Release is a *Problem: a refusal, or a
// SYSTEM_FAILURE (500) wrapping what failed, after which a retry of the same
// invocation takes no step twice.

// Create opens a charging data resource for req (its ref is the
// ChargingDataRef) and takes the first step of each rating group it names.
// A retry of a create that carried a charging id gets the same ref and
// answer; two creates without one are two sessions.
func (s *Service) Create(ctx context.Context, req *ChargingDataRequest) (string, *ChargingDataResponse, error) {
	if p := req.check(OpCreate); p != nil {
		return "", nil, p
	}
	ref, a, err := s.createReply(ctx, req)
	return ref, a.resp, err
}

// reply is a step's answer and its JSON (json.Marshal's bytes: what the
// session stores for a retry), encoded once.
type reply struct {
	resp *ChargingDataResponse
	body []byte
}

func (s *Service) createReply(ctx context.Context, req *ChargingDataRequest) (string, reply, error) {
	start := s.o.now()
	ref, a, replay, m, err := s.create(ctx, req)
	s.stepHook(OpCreate, ref, m, a.resp, replay, start, err)
	if err != nil {
		return "", reply{}, asProblem(err)
	}
	return ref, a, nil
}

func (s *Service) create(ctx context.Context, req *ChargingDataRequest) (string, reply, bool, store.Member, error) {
	asks, p := s.asks(req)
	if p != nil {
		return "", reply{}, false, store.Member{}, p
	}
	m, named, err := s.subscriber(ctx, req)
	if err != nil {
		return "", reply{}, false, store.Member{}, err
	}
	// A time-ordered ref (UUID v7): charging_session's primary key, which
	// takes each new session near its end rather than anywhere
	// (doc/benchmarks.md, "Event ids").
	ref := uuid.Must(uuid.NewV7()).String()
	now := s.o.now()
	row := store.ChargingSession{Ref: ref, CreateKey: createKey(req), FamilyID: m.FamilyID, MemberID: m.ID,
		Subscriber: truncate(named, store.MaxSubscriberLen), Consumer: consumer(req.NfConsumerIdentification),
		NotifyURI: req.NotifyURI, LastSeq: -1, LastOp: string(OpCreate), Grants: planned(ref, nil, asks),
		ExpiresAt: now.Add(s.o.validity + s.o.holding)}
	sess, created, err := s.sessions.OpenChargingSession(ctx, row)
	if err != nil {
		return "", reply{}, false, m, err
	}
	unlock, err := s.lock(ctx, sess.Ref)
	if err != nil {
		return "", reply{}, false, m, err
	}
	defer unlock()
	if created {
		s.cache.put(sess)
	} else { // a retry of this create: its session, maybe its answer
		if sess, err = s.fresh(ctx, sess.Ref); err != nil {
			return "", reply{}, false, m, err
		}
		if a, done, err := s.replay(sess, OpCreate, *req.InvocationSequenceNumber); done || err != nil {
			return sess.Ref, a, true, m, err
		}
	}
	a, err := s.step(ctx, sess, OpCreate, req, asks)
	return sess.Ref, a, false, m, moved(err)
}

// Update takes the next step of session ref: charges what req reports used
// and grants what it asks for. A retry of the last invocation gets the same
// answer; an older invocation is refused.
func (s *Service) Update(ctx context.Context, ref string, req *ChargingDataRequest) (*ChargingDataResponse, error) {
	if p := req.check(OpUpdate); p != nil {
		return nil, p
	}
	a, err := s.updateReply(ctx, ref, req)
	return a.resp, err
}

func (s *Service) updateReply(ctx context.Context, ref string, req *ChargingDataRequest) (reply, error) {
	start := s.o.now()
	a, replay, m, err := s.next(ctx, ref, OpUpdate, req)
	s.stepHook(OpUpdate, ref, m, a.resp, replay, start, err)
	if err != nil {
		return reply{}, asProblem(err)
	}
	return a, nil
}

// Release ends session ref: charges what req reports used and returns
// every reservation the session holds.
func (s *Service) Release(ctx context.Context, ref string, req *ChargingDataRequest) error {
	if p := req.check(OpRelease); p != nil {
		return p
	}
	return s.release(ctx, ref, req)
}

func (s *Service) release(ctx context.Context, ref string, req *ChargingDataRequest) error {
	start := s.o.now()
	_, replay, m, err := s.next(ctx, ref, OpRelease, req)
	s.stepHook(OpRelease, ref, m, nil, replay, start, err)
	if err != nil {
		return asProblem(err)
	}
	return nil
}

func (s *Service) next(ctx context.Context, ref string, op Op, req *ChargingDataRequest) (reply, bool, store.Member, error) {
	asked, p := s.asks(req)
	if p != nil {
		return reply{}, false, store.Member{}, p
	}
	unlock, err := s.lock(ctx, ref)
	if err != nil {
		return reply{}, false, store.Member{}, err
	}
	defer unlock()
	read, retried := s.session, false
	for {
		sess, err := read(ctx, ref)
		if errors.Is(err, store.ErrNotFound) {
			return reply{}, false, store.Member{}, noSession(ref)
		}
		if err != nil {
			return reply{}, false, store.Member{}, err
		}
		m := store.Member{ID: sess.MemberID, FamilyID: sess.FamilyID}
		if a, done, err := s.replay(sess, op, *req.InvocationSequenceNumber); done || err != nil {
			// A retry from where the SMF is now: its notifications follow
			// it, as its first try's would have.
			if moved, set, ok := s.follow(ctx, sess, op, req); ok && done && err == nil {
				if ok, err := set(); err == nil && ok {
					s.cache.put(moved)
				} else {
					s.cache.drop(sess.Ref) // moved on meanwhile, or unknown: the next step reads SQL
				}
			}
			return a, true, m, err
		}
		asks := onUPFs(sess.Grants, slices.Clone(asked))
		if op == OpRelease { // every grant the session holds is returned
			named := map[quotaKey]bool{}
			for _, a := range asks {
				named[a.key()] = true
			}
			for i := range asks {
				asks[i].release = true
			}
			for _, g := range sess.Grants {
				if !named[grantKey(g)] {
					asks = append(asks, ask{rg: g.RatingGroup, upf: g.UPFID, release: true})
				}
			}
		}
		a, err := s.step(ctx, sess, op, req, asks)
		if errors.Is(err, errMoved) && !retried {
			// The cached session was behind SQL (another process stepped
			// it): take this step again on SQL's; the Charger answers the
			// steps already taken from its record.
			read, retried = s.fresh, true
			continue
		}
		return a, false, m, moved(err)
	}
}

func noSession(ref string) *Problem {
	return &Problem{Status: http.StatusNotFound, Cause: CauseResourceContextNotFound,
		Detail: "no open charging data resource " + ref + ": it was released, expired or never created"}
}

// replay answers an invocation the session has seen: done with the stored
// answer for a retry of the last one, an error for an older one or one
// sent to a closed session; not done for a new one.
func (s *Service) replay(sess store.ChargingSession, op Op, seq uint32) (reply, bool, error) {
	last := sess.LastSeq
	again := int64(seq) == last && Op(sess.LastOp) == op
	switch {
	case sess.State != store.ChargingOpen:
		// Only a release is answered again once the session is closed: a
		// stored grant would name a reservation released since.
		if again && op == OpRelease {
			return reply{}, true, nil
		}
		return reply{}, true, noSession(sess.Ref)
	case again:
		var resp ChargingDataResponse
		if err := json.Unmarshal(sess.Answer, &resp); err != nil {
			return reply{}, true, fmt.Errorf("charging: stored answer of %s: %w", sess.Ref, err)
		}
		return reply{&resp, sess.Answer}, true, nil
	case int64(seq) <= last:
		return reply{}, true, badParam(CauseMandatoryIEIncorrect, "/invocationSequenceNumber",
			fmt.Sprintf("invocation %d was answered already (this session's last is %d): send a new one with a higher number, or repeat the last", seq, last))
	}
	return reply{}, false, nil
}

// planned is the session's grants once the asks are taken: each rating
// group asked for is held (a new one with no grant yet), each released one
// dropped.
func planned(ref string, have []store.ChargingGrant, asks []ask) []store.ChargingGrant {
	out := make([]store.ChargingGrant, 0, len(have)+len(asks))
	idx := map[quotaKey]int{}
	for _, g := range have {
		idx[grantKey(g)] = len(out)
		out = append(out, g)
	}
	for _, a := range asks {
		if _, ok := idx[a.key()]; !ok {
			idx[a.key()] = len(out)
			out = append(out, store.ChargingGrant{RatingGroup: a.rg, UPFID: a.upf, GrantID: GrantIDOn(ref, a.rg, a.upf)})
		}
	}
	return out
}

// step takes the Charger steps of one invocation and records its answer.
func (s *Service) step(ctx context.Context, sess store.ChargingSession, op Op, req *ChargingDataRequest, asks []ask) (reply, error) {
	seq := *req.InvocationSequenceNumber
	if moved, set, ok := s.follow(ctx, sess, op, req); ok {
		if a, done, err := s.amend(ctx, moved, op, seq, set); done {
			return a, err
		}
		sess = moved
	}
	// Record every rating group about to be asked for before asking, so a
	// crash after the ask leaves the sweep something to release.
	if op != OpCreate {
		grants := planned(sess.Ref, sess.Grants, asks)
		if len(grants) > len(sess.Grants) {
			planned := sess
			planned.Grants = grants
			if a, done, err := s.amend(ctx, planned, op, seq, func() (bool, error) {
				return s.sessions.SetChargingGrants(ctx, sess.Ref, sess.LastSeq, grants)
			}); done {
				return a, err
			}
		}
	}
	now := s.o.now()
	ops := make([]quota.GrantOp, len(asks))
	for i, a := range asks {
		cov := s.o.groups.Of(a.rg)
		ops[i] = quota.GrantOp{ID: StepIDOn(sess.Ref, a.rg, a.upf, seq), GrantID: GrantIDOn(sess.Ref, a.rg, a.upf), FamilyID: sess.FamilyID,
			CustomerID: sess.MemberID, AppID: cov.AppID, Category: cov.Category, Used: a.used,
			Requested: a.requested, Release: a.release, At: now}
		if a.release {
			ops[i].Requested = 0
		}
	}
	var results []quota.GrantResult
	if len(ops) > 0 {
		var err error
		if results, err = s.charger.Charge(ctx, ops); err != nil {
			return reply{}, fmt.Errorf("charging: grant steps: %w", err)
		}
		if len(results) != len(ops) {
			return reply{}, fmt.Errorf("charging: %d grant steps answered with %d results", len(ops), len(results))
		}
	}
	resp := &ChargingDataResponse{InvocationTimeStamp: now.UTC().Truncate(time.Millisecond), InvocationSequenceNumber: seq}
	held := map[quotaKey]store.ChargingGrant{}
	for _, g := range sess.Grants {
		held[grantKey(g)] = g
	}
	for i, a := range asks {
		r := results[i]
		if a.release {
			delete(held, a.key())
			if a.inAnswer {
				resp.MultipleUnitInformation = append(resp.MultipleUnitInformation,
					MultipleUnitInformation{ResultCode: ResultSuccess, RatingGroup: a.rg, UPFID: a.upf})
			}
			continue
		}
		mui, until := s.answer(a, r, now)
		resp.MultipleUnitInformation = append(resp.MultipleUnitInformation, mui)
		held[a.key()] = store.ChargingGrant{RatingGroup: a.rg, UPFID: a.upf, GrantID: ops[i].GrantID, Granted: r.Granted, ValidUntil: until}
	}
	st := store.ChargingStep{Seq: int64(seq), Op: string(op), State: store.ChargingOpen}
	expires := now.Add(s.o.validity)
	if len(held) > 0 {
		expires = now
	}
	for _, a := range planned(sess.Ref, sess.Grants, asks) { // the session's order, then the new ones
		if g, ok := held[grantKey(a)]; ok {
			st.Grants = append(st.Grants, g)
			if g.ValidUntil.After(expires) {
				expires = g.ValidUntil
			}
		}
	}
	st.ExpiresAt = expires.Add(s.o.holding)
	if op == OpRelease {
		st.State, st.Grants = store.ChargingClosed, nil
	} else {
		b, err := encodeResponse(resp)
		if err != nil {
			return reply{}, err
		}
		st.Answer = b
	}
	ok, err := s.record(ctx, store.ChargingStepOn{Ref: sess.Ref, PrevSeq: sess.LastSeq, Step: st})
	if err != nil {
		s.cache.drop(sess.Ref) // written or not: the next step reads SQL
		// Closed meanwhile (a release or a sweep elsewhere): what this step
		// reserved is nobody's, as when the write finds it moved on. Open,
		// or unknown: the invocation's retry takes the step again (its
		// steps are answered from the Charger's record) or the sweep
		// returns the session's grants.
		if cur, rerr := s.sessions.ChargingSession(ctx, sess.Ref); errors.Is(rerr, store.ErrNotFound) || (rerr == nil && cur.State != store.ChargingOpen) {
			s.undo(ctx, sess, ops, results)
		}
		return reply{}, err
	}
	if !ok {
		a, open, err := s.raced(ctx, sess.Ref, op, seq)
		if !open {
			s.undo(ctx, sess, ops, results)
		}
		return a, err
	}
	after := sess
	after.LastSeq, after.LastOp, after.Answer, after.Grants, after.ExpiresAt, after.State = st.Seq, st.Op, st.Answer, st.Grants, st.ExpiresAt, st.State
	s.cache.put(after)
	// Grants the engine found holding more than their fair share while
	// this one was cut are asked to report again (and shrink to it).
	var reclaim []string
	for _, r := range results {
		reclaim = append(reclaim, r.Reclaim...)
	}
	if len(reclaim) > 0 {
		s.reclaimed(sess.FamilyID, reclaim)
	}
	if op == OpRelease {
		return reply{}, nil
	}
	return reply{resp, st.Answer}, nil
}

// follow is sess with the notifyUri an update names, when that is another
// (the SMF takes notifications elsewhere now: another instance of its set
// took the session over, or it came back on a new address), and the
// conditional write that records it; false when the update moves nothing.
func (s *Service) follow(ctx context.Context, sess store.ChargingSession, op Op, req *ChargingDataRequest) (store.ChargingSession, func() (bool, error), bool) {
	if op != OpUpdate || req.NotifyURI == "" || req.NotifyURI == sess.NotifyURI {
		return sess, nil, false
	}
	moved := sess
	moved.NotifyURI = req.NotifyURI
	return moved, func() (bool, error) {
		return s.sessions.SetChargingNotifyURI(ctx, sess.Ref, sess.LastSeq, req.NotifyURI)
	}, true
}

// amend writes a change of a session before its step (set: conditional on
// the last_seq it was read at) and caches the session as changed; done
// when the step ends there: set failed, or the session moved on
// meanwhile (raced's answer).
func (s *Service) amend(ctx context.Context, changed store.ChargingSession, op Op, seq uint32, set func() (bool, error)) (reply, bool, error) {
	ok, err := set()
	if err != nil {
		s.cache.drop(changed.Ref)
		return reply{}, true, err
	}
	if !ok {
		a, _, err := s.raced(ctx, changed.Ref, op, seq)
		return a, true, err
	}
	s.cache.put(changed)
	return reply{}, false, nil
}

// raced answers a step whose session moved on since it was read (here,
// or cached: another process stepped or closed it since): the same
// invocation answered meanwhile (by this invocation's retry, here or in
// another process) gets that answer, as its retry would; anything else is
// refused as replay refuses it. open is false when the session is closed
// or gone (what the step reserved is then nobody's: undo).
func (s *Service) raced(ctx context.Context, ref string, op Op, seq uint32) (reply, bool, error) {
	sess, err := s.fresh(ctx, ref)
	if errors.Is(err, store.ErrNotFound) {
		return reply{}, false, noSession(ref)
	}
	if err != nil {
		return reply{}, true, err
	}
	open := sess.State == store.ChargingOpen
	if a, done, err := s.replay(sess, op, seq); done || err != nil {
		return a, open, err
	}
	return reply{}, open, errMoved
}

// undo returns what ops reserved for sess when sess was closed meanwhile
// (by its release or the sweep in another process, after this one read
// it): no session holds those grants any more, so no sweep would. Every
// step that asked is released, also one granted nothing: a grant crowded
// out (none granted, not final) stays open in the engine, counted among
// the family's grants, for its next step. A release of a grant holding
// nothing returns nothing (Charger).
func (s *Service) undo(ctx context.Context, sess store.ChargingSession, ops []quota.GrantOp, results []quota.GrantResult) {
	var rel []quota.GrantOp
	for i, op := range ops {
		if !op.Release && i < len(results) {
			rel = append(rel, quota.GrantOp{ID: envelope.DerivedID("grs_", op.ID, "undo"), GrantID: op.GrantID, FamilyID: op.FamilyID,
				CustomerID: op.CustomerID, AppID: op.AppID, Category: op.Category, Release: true, At: s.o.now()})
		}
	}
	if len(rel) == 0 {
		return
	}
	if _, err := s.charger.Charge(ctx, rel); err != nil {
		s.o.log.Error("charging: a step of a session closed meanwhile reserved bytes that could not be returned",
			"ref", sess.Ref, "grants", len(rel), "err", err)
	}
}

func (s *Service) stepHook(op Op, ref string, m store.Member, resp *ChargingDataResponse, replay bool, start time.Time, err error) {
	if s.o.hooks.OnStep == nil {
		return
	}
	info := StepInfo{Op: op, Ref: ref, FamilyID: m.FamilyID, MemberID: m.ID, Retransmit: replay, Took: s.o.now().Sub(start), Err: err}
	if resp != nil {
		for _, u := range resp.MultipleUnitInformation {
			if u.GrantedUnit != nil && u.GrantedUnit.TotalVolume != nil {
				info.Granted += int64(*u.GrantedUnit.TotalVolume)
			}
		}
	}
	s.o.hooks.OnStep(info)
}
