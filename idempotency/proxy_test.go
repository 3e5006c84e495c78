package idempotency

import (
	"io"
	"net"
	"sync"
	"testing"
)

// outageProxy forwards TCP connections to a server and can take it "down":
// Down closes every open connection and refuses new ones, Up accepts again
// on the same address. To the client that is the database going away and
// coming back, without touching a server other tests share.
type outageProxy struct {
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func newOutageProxy(tb testing.TB, target string) *outageProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &outageProxy{target: target, addr: ln.Addr().String(), conns: map[net.Conn]bool{}}
	p.serve(ln)
	tb.Cleanup(func() { p.Down(); p.wg.Wait() })
	return p
}

func (p *outageProxy) serve(ln net.Listener) {
	p.ln = ln
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.pipe(c) })
		}
	})
}

func (p *outageProxy) pipe(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // went down meanwhile
		p.mu.Unlock()
		c.Close()
		s.Close()
		return
	}
	p.conns[c], p.conns[s] = true, true
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { io.Copy(s, c); s.Close() })
	wg.Go(func() { io.Copy(c, s); c.Close() })
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// Down refuses new connections and cuts the open ones.
func (p *outageProxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
}

// Up accepts connections again on the same address.
func (p *outageProxy) Up(tb testing.TB) {
	tb.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		tb.Fatalf("proxy up: %v", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serve(ln)
}
