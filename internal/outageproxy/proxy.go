// Package outageproxy is a test helper: a TCP proxy that can take a server
// "down" for its clients without touching the server other tests share.
package outageproxy

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a server and can take it "down":
// Down closes every open connection and refuses new ones, Up accepts again
// on the same address. To the client that is the database going away and
// coming back, without touching a server other tests share.
type Proxy struct {
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// New starts a proxy to target, up. It listens on a port below Linux's
// ephemeral range (32768 and up): Up listens on the same port again, and a
// port the kernel hands out (any test's ":0" listener or outgoing
// connection) could be taken while the proxy is down.
func New(tb testing.TB, target string) *Proxy {
	tb.Helper()
	var ln net.Listener
	var err error
	for range 100 {
		// 10000–19999, as testenv.FreeAddr (which links what this
		// package must not).
		if ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 10000+rand.IntN(10000))); err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), conns: map[net.Conn]bool{}}
	p.serve(ln)
	tb.Cleanup(func() { p.Down(); p.wg.Wait() })
	return p
}

func (p *Proxy) serve(ln net.Listener) {
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

func (p *Proxy) pipe(c net.Conn) {
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
func (p *Proxy) Down() {
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
func (p *Proxy) Up(tb testing.TB) {
	tb.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		tb.Fatalf("proxy up: %v", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serve(ln)
}

// Addr is the proxy's listening address, to give clients instead of the target's.
func (p *Proxy) Addr() string { return p.addr }
