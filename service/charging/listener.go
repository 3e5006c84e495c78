package charging

import (
	"net"
	"sync"
)

// LimitConnections returns ln accepting at most maxOpen connections open
// at once, and at most perPeer of them from one peer (IP address): past
// either, a connection is closed as soon as it is accepted (before any
// TLS handshake or HTTP/2 preface) and onRefused (when set) is called. A
// client that opens connections without end so costs a file descriptor
// for a moment, not memory; it cannot take the places of the others
// beyond perPeer; and a client refused learns at once and can try
// another charging function (a listener that stopped accepting would
// leave it waiting in the kernel's queue). An SMF keeps one or a few
// connections, each carrying many requests at once (HTTP/2 streams): the
// bound is on clients, not on load (HandlerConfig.MaxInFlight is).
func LimitConnections(ln net.Listener, maxOpen, perPeer int, onRefused func()) net.Listener {
	return &limitedListener{Listener: ln, max: maxOpen, perPeer: perPeer, onRefused: onRefused, by: map[string]int{}}
}

type limitedListener struct {
	net.Listener
	max, perPeer int
	onRefused    func()

	mu   sync.Mutex
	open int
	by   map[string]int // open connections by peer
}

// Accept returns the next connection within the bounds, closing those past
// them.
func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		from := peer(c.RemoteAddr().String())
		if l.take(from) {
			return &limitedConn{Conn: c, l: l, from: from}, nil
		}
		if l.onRefused != nil {
			l.onRefused()
		}
		_ = c.Close()
	}
}

func (l *limitedListener) take(from string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open >= l.max || l.by[from] >= l.perPeer {
		return false
	}
	l.open++
	l.by[from]++
	return true
}

func (l *limitedListener) release(from string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	decrement(l.by, from)
}

type limitedConn struct {
	net.Conn
	l    *limitedListener
	from string
	once sync.Once
}

// Close closes the connection and frees its place (once).
func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.from) })
	return err
}
