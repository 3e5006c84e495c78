package api

import (
	"errors"
	"fmt"
	"sync"

	"github.com/dabom/dpcs/service/access"
)

// liveStreams are this instance's open SSE streams by member, so that an
// access.Event reaches the ones it concerns, within its limits.
type liveStreams struct {
	limits   StreamLimits
	mu       sync.Mutex
	total    int
	byMember map[int64]map[*liveStream]struct{}
}

// liveStream is one open SSE stream: recheck (buffered 1) asks its goroutine
// to check the stream's access against the store again.
type liveStream struct {
	member  int64
	session string
	recheck chan struct{}
}

// newLiveStreams holds streams within limits (defaults applied).
func newLiveStreams(limits StreamLimits) *liveStreams {
	return &liveStreams{limits: limits, byMember: map[int64]map[*liveStream]struct{}{}}
}

// streamLimitError is a stream refused by a bound of StreamLimits: Of says
// whose ("session", "member" or "instance") and Limit how many it may hold.
type streamLimitError struct {
	Of    string
	Limit int
}

func (e *streamLimitError) Error() string {
	n := fmt.Sprintf("%d live streams", e.Limit)
	if e.Limit == 1 {
		n = "1 live stream"
	}
	switch e.Of {
	case "session":
		return "this session has " + n + " open, the most it may: close one (another tab) before opening another"
	case "member":
		return "this member has " + n + " open over all its sessions, the most it may: close one (on another device) before opening another"
	}
	return "this server holds " + n + ", the most it may: retry later"
}

// open registers a stream of member in session, or refuses it with a
// *streamLimitError when the instance, the member or the session holds as
// many as it may; the returned func unregisters it.
func (l *liveStreams) open(member int64, session string) (*liveStream, func(), error) {
	s := &liveStream{member: member, session: session, recheck: make(chan struct{}, 1)}
	l.mu.Lock()
	defer l.mu.Unlock()
	set := l.byMember[member]
	inSession := 0
	for o := range set {
		if o.session == session {
			inSession++
		}
	}
	switch {
	case l.total >= l.limits.Total:
		return nil, nil, &streamLimitError{Of: "instance", Limit: l.limits.Total}
	case len(set) >= l.limits.PerMember:
		return nil, nil, &streamLimitError{Of: "member", Limit: l.limits.PerMember}
	case inSession >= l.limits.PerSession:
		return nil, nil, &streamLimitError{Of: "session", Limit: l.limits.PerSession}
	}
	if set == nil {
		set = map[*liveStream]struct{}{}
		l.byMember[member] = set
	}
	set[s] = struct{}{}
	l.total++
	return s, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		cur := l.byMember[member] // holds s: a set leaves the map only when empty
		delete(cur, s)
		l.total--
		if len(cur) == 0 {
			delete(l.byMember, member)
		}
	}, nil
}

// kick asks every stream e concerns to re-check its access; it never blocks.
func (l *liveStreams) kick(e access.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	poke := func(set map[*liveStream]struct{}) {
		for s := range set {
			if e.Session != "" && !e.All && s.session != e.Session {
				continue
			}
			select {
			case s.recheck <- struct{}{}:
			default: // a re-check is already pending
			}
		}
	}
	if e.All {
		for _, set := range l.byMember {
			poke(set)
		}
		return
	}
	poke(l.byMember[e.Member])
}

// OpenStreams is the number of live SSE streams this instance holds (at
// most Config.Streams.Total), for metrics.
func (a *Server) OpenStreams() int { return a.streams.count() }

// count is the number of open streams (for tests and metrics).
func (l *liveStreams) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// StreamLimits bound the live SSE streams one API instance holds; zero
// fields take the defaults. Beyond PerSession or PerMember a new stream is
// answered 429, beyond Total 503 with Retry-After (doc/security.md,
// "Limits"). Each instance counts its own streams: behind a load balancer
// a member may hold PerMember on each.
type StreamLimits struct {
	// PerSession bounds the streams opened with one session's access
	// tokens (one login: its tabs). Default: DefaultStreamsPerSession.
	PerSession int `envconfig:"PER_SESSION" doc_default:"5" deployables:"server, all-in-one" desc:"live notification streams (SSE) one session may hold open on an API instance (1 to 1000); one more is answered 429"`
	// PerMember bounds a member's streams over all its sessions (its
	// devices). Default: DefaultStreamsPerMember.
	PerMember int `envconfig:"PER_MEMBER" doc_default:"10" deployables:"server, all-in-one" desc:"live notification streams one member may hold open on an API instance over all its sessions (1 to 1000); one more is answered 429"`
	// Total bounds every stream of the instance (each holds a goroutine,
	// a connection and buffers). Default: DefaultStreamsTotal.
	Total int `envconfig:"MAX" doc_default:"2000" deployables:"server, all-in-one" desc:"live notification streams an API instance holds open in all (1 to 1000000); one more is answered 503 with Retry-After"`
}

// Defaults of StreamLimits.
const (
	DefaultStreamsPerSession = 5
	DefaultStreamsPerMember  = 10
	DefaultStreamsTotal      = 2000
)

// withDefaults fills zero fields with the defaults and refuses negative
// ones.
func (l StreamLimits) withDefaults() (StreamLimits, error) {
	for _, f := range []struct {
		n   *int
		def int
	}{{&l.PerSession, DefaultStreamsPerSession}, {&l.PerMember, DefaultStreamsPerMember}, {&l.Total, DefaultStreamsTotal}} {
		switch {
		case *f.n < 0:
			return l, errors.New("api: Config.Streams: limits must not be negative")
		case *f.n == 0:
			*f.n = f.def
		}
	}
	return l, nil
}
