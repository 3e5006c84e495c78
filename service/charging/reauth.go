package charging

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/service/store"
)

// Reauthorize asks every live session of member memberID of family familyID
// (every member's, when memberID is 0) to report and ask again: a
// ChargingNotifyRequest (REAUTHORIZATION) to each session's notifyUri, so
// that its next update is judged by the family's policy as it is now. Call
// it after every change to a family's policy, plan or membership. It
// returns once the notifications are queued; they are delivered in the
// background (Hooks.OnNotify), per destination, so one slow SMF delays no
// other's.
func (s *Service) Reauthorize(ctx context.Context, familyID, memberID int64) error {
	since := s.o.now()
	live, err := s.sessions.LiveChargingSessions(ctx, familyID, memberID)
	if err != nil {
		return fmt.Errorf("charging: reauthorize family %d: %w", familyID, err)
	}
	for _, sess := range live {
		if sess.NotifyURI == "" {
			continue
		}
		s.notifier.enqueue(notifyJob{ref: sess.Ref, uri: sess.NotifyURI, body: reauthBody(sess), since: since})
	}
	return nil
}

// ReauthorizeFamily is Reauthorize for every member of the family.
func (s *Service) ReauthorizeFamily(ctx context.Context, familyID int64) error {
	return s.Reauthorize(ctx, familyID, 0)
}

// Changed is Reauthorize in the background, for hooks that must not block
// (the application layer's, family.WithOnChange): it returns at once, and
// the service's own worker looks the live sessions up and queues their
// notifications. No member named: every member's sessions. Changes of one
// family that arrive while the worker is busy are taken together.
func (s *Service) Changed(familyID int64, memberIDs ...int64) {
	s.changes.add(func(c *changes) {
		members, ok := c.pending[familyID]
		switch {
		case ok && members == nil: // the whole family already
		case len(memberIDs) == 0:
			c.pending[familyID] = nil
		default:
			if members == nil {
				members = map[int64]bool{}
			}
			for _, m := range memberIDs {
				members[m] = true
			}
			c.pending[familyID] = members
		}
	})
}

// changes are the families changed and not yet looked up (nil members:
// every member).
type changes struct {
	mu      sync.Mutex
	pending map[int64]map[int64]bool
	// reclaim are grants (by family, GrantID) the engine asked to report
	// again: they hold more than their fair share of the pool while
	// another member's grant was cut (quota.GrantResult.Reclaim).
	reclaim map[int64]map[string]bool
	// reidentify are the members (by family) whose identities changed
	// (Reidentified).
	reidentify map[int64]map[int64]bool
	closed     bool
	wake       chan struct{}
	done       chan struct{}
}

// add records a change with f (under the lock) and wakes the worker;
// nothing once the service is closing.
func (c *changes) add(f func(*changes)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	f(c)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// finalPass bounds the change worker's last pass at Close.
const finalPass = 5 * time.Second

// changeLoop looks up the live sessions of the families changed until ctx
// ends, then once more for what is left.
func (s *Service) changeLoop(ctx context.Context) {
	defer close(s.changes.done)
	for {
		select {
		case <-ctx.Done():
			s.changes.mu.Lock()
			s.changes.closed = true
			s.changes.mu.Unlock()
			// The last changes, within a bound: a database that does not
			// answer must not hold Close past its own deadline for long.
			last, cancel := context.WithTimeout(context.Background(), finalPass)
			s.reauthorizePending(last)
			cancel()
			return
		case <-s.changes.wake:
			s.reauthorizePending(ctx)
		}
	}
}

// reclaimed queues the grants the engine named for reauthorization.
func (s *Service) reclaimed(familyID int64, grantIDs []string) {
	s.changes.add(func(c *changes) {
		ids := c.reclaim[familyID]
		if ids == nil {
			ids = map[string]bool{}
			c.reclaim[familyID] = ids
		}
		for _, id := range grantIDs {
			ids[id] = true
		}
	})
}

// reauthorizeGrants asks the live sessions of family fid that hold one of
// the grants to report again, naming those grants' rating groups.
func (s *Service) reauthorizeGrants(ctx context.Context, fid int64, grants map[string]bool) error {
	since := s.o.now()
	live, err := s.sessions.LiveChargingSessions(ctx, fid, 0)
	if err != nil {
		return err
	}
	for _, sess := range live {
		s.askToReport(sess, func(g store.ChargingGrant) bool { return grants[g.GrantID] }, since)
	}
	return nil
}

func (s *Service) reauthorizePending(ctx context.Context) {
	s.changes.mu.Lock()
	pending, reclaim, reid := s.changes.pending, s.changes.reclaim, s.changes.reidentify
	s.changes.pending, s.changes.reclaim, s.changes.reidentify = map[int64]map[int64]bool{}, map[int64]map[string]bool{}, map[int64]map[int64]bool{}
	s.changes.mu.Unlock()
	for fid, members := range reid {
		for m := range members {
			if err := s.reidentify(ctx, fid, m); err != nil {
				s.o.log.Warn("charging: live sessions of a member whose identity changed not checked", "familyId", fid, "memberId", m, "err", err)
			}
		}
	}
	for fid, grants := range reclaim {
		if members, ok := pending[fid]; ok && members == nil {
			continue // the family's change asks its sessions anyway
		}
		if err := s.reauthorizeGrants(ctx, fid, grants); err != nil {
			s.o.log.Warn("charging: grants over their fair share not asked to report", "familyId", fid, "err", err)
		}
	}
	for fid, members := range pending {
		if members == nil {
			members = map[int64]bool{0: true}
		}
		for m := range members {
			if err := s.Reauthorize(ctx, fid, m); err != nil {
				s.o.log.Warn("charging: live sessions of a changed family not reauthorized", "familyId", fid, "memberId", m, "err", err)
			}
		}
	}
}

// reauthBody is the REAUTHORIZATION of every rating group the session
// holds, each once (on every UPF: ReauthorizationDetails names no UPF;
// none named: the whole session).
func reauthBody(sess store.ChargingSession) []byte {
	req := ChargingNotifyRequest{NotificationType: NotificationReauthorization}
	for i, g := range sess.Grants {
		if slices.ContainsFunc(sess.Grants[:i], func(h store.ChargingGrant) bool { return h.RatingGroup == g.RatingGroup }) {
			continue
		}
		rg := g.RatingGroup
		req.ReauthorizationDetails = append(req.ReauthorizationDetails, ReauthorizationDetails{RatingGroup: &rg})
	}
	b, _ := json.Marshal(req) // plain data: always marshals
	return b
}

type notifyJob struct {
	ref, uri string
	body     []byte
	since    time.Time
	// abort is an ABORT_CHARGING: it replaces a notification of the same
	// session still waiting, which it makes moot.
	abort bool
	// low is a catalog scan's (CatalogChanged): it waits behind the
	// others and fills at most half its destination's queue.
	low bool
}

// waiting is what a session's waiting notification q becomes when j comes
// for it too: an ABORT_CHARGING takes its place (and stays), and two
// REAUTHORIZATIONs become one naming the rating groups of both (none
// named, the whole session, when either names none).
func waiting(q, j notifyJob) notifyJob {
	switch {
	case q.abort:
		return q
	case j.abort:
		return j
	}
	var a, b ChargingNotifyRequest
	if json.Unmarshal(q.body, &a) != nil || json.Unmarshal(j.body, &b) != nil {
		return j // our own bodies: always decode
	}
	if len(a.ReauthorizationDetails) == 0 || len(b.ReauthorizationDetails) == 0 {
		a.ReauthorizationDetails = nil
	} else {
		for _, d := range b.ReauthorizationDetails {
			if !slices.ContainsFunc(a.ReauthorizationDetails, func(e ReauthorizationDetails) bool { return *e.RatingGroup == *d.RatingGroup }) {
				a.ReauthorizationDetails = append(a.ReauthorizationDetails, d)
			}
		}
	}
	q.body, _ = json.Marshal(a) // plain data: always marshals
	return q
}

// abortBody is the ABORT_CHARGING of a session.
var abortBody = []byte(`{"notificationType":"` + NotificationAbortCharging + `"}`)

// aborted tells sess's SMF that the sweep closed it (ABORT_CHARGING at its
// notifyUri).
func (s *Service) aborted(sess store.ChargingSession) {
	if sess.NotifyURI != "" {
		s.notifier.enqueue(notifyJob{ref: sess.Ref, uri: sess.NotifyURI, body: abortBody, since: s.o.now(), abort: true})
	}
}

// destination is one consumer endpoint's queue, drained by its own worker
// while it has jobs.
type destination struct {
	jobs    []notifyJob
	running bool
	room    chan struct{} // closed when jobs shrinks, if someone waits
}

// notifier delivers notifications, keeping destinations apart: each
// (scheme, host and port) has its own bounded queue and worker, so an SMF
// that answers slowly or not at all holds up only its own sessions'
// notifications.
type notifier struct {
	o      options
	client *http.Client
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	dests   map[string]*destination
	queued  map[string]string // refs waiting (not yet being delivered): their destinations
	closing bool
}

func newNotifier(o options) *notifier {
	c := o.notifyClient
	if c == nil {
		c = notifyClient(o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &notifier{o: o, client: c, ctx: ctx, cancel: cancel, dests: map[string]*destination{}, queued: map[string]string{}}
}

// notifyClient is the default client: HTTP/2 as the SBI speaks it
// (cleartext with prior knowledge for http URIs, TLS with ALPN for https
// ones), dialled through the guard, no proxy, no redirects.
func notifyClient(o options) *http.Client {
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	dial := notify.GuardedDialer(o.notifyTimeout, o.notifyLoopback, o.notifyNetworks...)
	tr := &http.Transport{DialContext: dial.DialContext, Protocols: &p, TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: o.notifyTimeout}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func destKey(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		return uri
	}
	return strings.ToLower(u.Scheme + "://" + u.Host)
}

// enqueue queues j behind its destination's others. A session already
// waiting is not queued twice: its waiting notification carries the news
// (waiting); a full queue drops j (Hooks.OnNotify: Dropped).
func (n *notifier) enqueue(j notifyJob) { n.enqueueWithin(context.Background(), j, 0) }

// enqueueWithin is enqueue waiting up to wait (or until ctx ends) for room
// in j's destination's queue while it is full: a scan of many sessions
// goes at the pace its destinations take their notifications. A low job
// (a scan's) fills at most half the queue, waits behind the others and
// takes none of their places, so a family's change is neither dropped nor
// delayed by a scan; its drop is not logged (the scan sums its drops up). It reports whether j was
// queued (or merged into its session's waiting one).
func (n *notifier) enqueueWithin(ctx context.Context, j notifyJob, wait time.Duration) bool {
	var deadline <-chan time.Time
	for {
		queued, room := n.tryEnqueue(j)
		if queued || room == nil {
			return queued
		}
		if deadline == nil && wait > 0 {
			t := time.NewTimer(wait)
			defer t.Stop()
			deadline = t.C
		}
		if wait > 0 {
			select {
			case <-room:
				continue
			case <-deadline:
			case <-ctx.Done():
			case <-n.ctx.Done():
			}
		}
		if !j.low {
			n.o.log.Warn("charging: notification dropped: its destination's queue is full", "ref", j.ref, "destination", destKey(j.uri))
		}
		n.hook(NotifyInfo{Ref: j.ref, URI: j.uri, Dropped: true, Latency: n.o.now().Sub(j.since)})
		return false
	}
}

// tryEnqueue queues j when its destination's queue has room for it (true),
// else returns a channel closed when the queue next shrinks. Nothing is
// queued (false, nil) once the notifier is closing.
func (n *notifier) tryEnqueue(j notifyJob) (bool, <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closing {
		return false, nil
	}
	key, moved := destKey(j.uri), false
	if at, ok := n.queued[j.ref]; ok {
		// The session's notification waiting takes this one's news, and
		// goes where this one goes: the session's SMF may have moved
		// (an update named another notifyUri).
		if w := n.dests[at]; w != nil {
			if i := slices.IndexFunc(w.jobs, func(q notifyJob) bool { return q.ref == j.ref }); i >= 0 {
				q := w.jobs[i]
				merged := waiting(q, j)
				merged.uri, merged.low = j.uri, q.low && j.low
				if at == key && merged.low == q.low {
					w.jobs[i] = merged
					return true, nil
				}
				w.jobs = slices.Delete(w.jobs, i, i+1)
				w.shrunk()
				delete(n.queued, j.ref)
				j, moved = merged, true // queued below, at its place in its destination
			}
		}
	}
	d := n.dests[key]
	if d == nil {
		d = &destination{}
		n.dests[key] = d
	}
	// A low job fits while the queue is under half full; any other while
	// the others (not low) are under its bound: a scan never takes a
	// family change's place.
	queued, limit := len(d.jobs), max(1, n.o.notifyQueue/2)
	if !j.low {
		queued, limit = len(d.jobs)-d.lows(), n.o.notifyQueue
	}
	if queued >= limit && !moved { // one queued already moves whatever the bound
		if d.room == nil {
			d.room = make(chan struct{})
		}
		return false, d.room
	}
	d.jobs = slices.Insert(d.jobs, d.place(j), j)
	n.queued[j.ref] = key
	if !d.running {
		d.running = true
		n.wg.Add(1)
		go n.drain(key, d)
	}
	return true, nil
}

// shrunk wakes those waiting for room in d's queue (enqueueWithin).
func (d *destination) shrunk() {
	if d.room != nil {
		close(d.room)
		d.room = nil
	}
}

// lows is how many of d's jobs are low.
func (d *destination) lows() int {
	n := 0
	for _, j := range d.jobs {
		if j.low {
			n++
		}
	}
	return n
}

// place is where j goes in d's queue: last, or a job that is not low
// before the first low one.
func (d *destination) place(j notifyJob) int {
	if j.low {
		return len(d.jobs)
	}
	if i := slices.IndexFunc(d.jobs, func(q notifyJob) bool { return q.low }); i >= 0 {
		return i
	}
	return len(d.jobs)
}

// drain delivers d's jobs one after the other until none is left.
func (n *notifier) drain(key string, d *destination) {
	defer n.wg.Done()
	for {
		n.mu.Lock()
		if len(d.jobs) == 0 {
			d.running = false
			delete(n.dests, key)
			n.mu.Unlock()
			return
		}
		j := d.jobs[0]
		d.jobs = d.jobs[1:]
		d.shrunk()
		// A change from now on queues a new notification: this one may
		// already be on its way.
		delete(n.queued, j.ref)
		n.mu.Unlock()
		n.deliver(j)
	}
}

// deliver tries j until the consumer answers 2xx, refuses it for good
// (another 4xx than 408 and 429: a 404 says it no longer knows the
// session), the attempts run out or the notifier is stopped.
func (n *notifier) deliver(j notifyJob) {
	info := NotifyInfo{Ref: j.ref, URI: j.uri, Type: NotificationReauthorization}
	if j.abort {
		info.Type = NotificationAbortCharging
	}
	for attempt := 1; ; attempt++ {
		info.Attempts = attempt
		status, err := n.post(j)
		info.Status, info.Err = status, err
		if err == nil && status/100 == 2 {
			info.Delivered = true
			break
		}
		if retry := err != nil || status >= 500 || status == http.StatusRequestTimeout || status == http.StatusTooManyRequests; !retry ||
			attempt >= n.o.notifyAttempts || errors.Is(err, notify.ErrNotPublic) {
			break
		}
		t := time.NewTimer(n.o.notifyBackoff.Delay(attempt))
		select {
		case <-n.ctx.Done():
			t.Stop()
			info.Err = errors.Join(info.Err, n.ctx.Err())
			n.end(j, info)
			return
		case <-t.C:
		}
	}
	n.end(j, info)
}

func (n *notifier) end(j notifyJob, info NotifyInfo) {
	info.Latency = n.o.now().Sub(j.since)
	if !info.Delivered {
		if info.Err == nil {
			info.Err = fmt.Errorf("answered %d", info.Status)
		}
		n.o.log.Warn("charging: notification not delivered", "type", info.Type, "ref", j.ref, "uri", j.uri, "attempts", info.Attempts, "err", info.Err)
	}
	n.hook(info)
}

func (n *notifier) hook(info NotifyInfo) {
	if n.o.hooks.OnNotify != nil {
		n.o.hooks.OnNotify(info)
	}
}

// post sends j once and returns the answer's status.
func (n *notifier) post(j notifyJob) (int, error) {
	ctx, cancel := context.WithTimeout(n.ctx, n.o.notifyTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, j.uri, bytes.NewReader(j.body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, application/problem+json")
	resp, err := n.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// close stops queueing, lets the queued notifications be tried until ctx
// ends, then abandons the rest.
func (n *notifier) close(ctx context.Context) error {
	n.mu.Lock()
	n.closing = true
	n.mu.Unlock()
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	defer n.client.CloseIdleConnections() // no pooled connection outlives the notifier
	select {
	case <-done:
		n.cancel()
		return nil
	case <-ctx.Done():
		n.cancel()
		<-done
		return ctx.Err()
	}
}
