package charging

import (
	"net"
	"sync"
	"sync/atomic"
)

// LimitConnections returns ln accepting at most max connections open at
// once: past it, a connection is closed as soon as it is accepted (before
// any TLS handshake or HTTP/2 preface), and onRefused (when set) is
// called, so a client that opens connections without end costs a file
// descriptor for a moment, not memory, and a client refused can try
// another charging function at once (a refusal to accept would leave it
// waiting in the kernel's queue until its own timeout). Each connection
// an SMF keeps carries many requests at once (HTTP/2 streams), so the
// bound is on clients, not on load (HandlerConfig.MaxInFlight is).
func LimitConnections(ln net.Listener, max int, onRefused func()) net.Listener {
	return &limitedListener{Listener: ln, max: int64(max), onRefused: onRefused}
}

type limitedListener struct {
	net.Listener
	max       int64
	open      atomic.Int64
	onRefused func()
}

// Accept returns the next connection within the bound, closing those past
// it.
func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &limitedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		_ = c.Close()
		if l.onRefused != nil {
			l.onRefused()
		}
	}
}

type limitedConn struct {
	net.Conn
	l    *limitedListener
	once sync.Once
}

// Close closes the connection and frees its place (once).
func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
