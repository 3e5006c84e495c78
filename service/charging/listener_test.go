package charging_test

import (
	"errors"
	"io"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/dabom/dpcs/service/charging"
)

// Past the bound in all, or from one peer, a connection is closed as soon
// as it is accepted (its client reads the end at once) and counted; one
// closed frees its place, once.
func TestLimitConnections(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("dials from 127.0.0.2 and 127.0.0.3: all of 127.0.0.0/8 is loopback on Linux only")
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan struct{}, 4)
	ln := charging.LimitConnections(inner, 3, 2, func() { refused <- struct{}{} })
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	within := func() net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("a connection within the bounds was not accepted")
		}
		return nil
	}
	past := func(c net.Conn, why string) {
		t.Helper()
		select {
		case <-refused:
		case a := <-accepted:
			t.Fatalf("%s: accepted %v", why, a.RemoteAddr())
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: neither accepted nor refused", why)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || (!errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET)) {
			t.Errorf("%s: its client read %d, %v; want the connection's end", why, n, err)
		}
	}
	dial("127.0.0.1")
	first := within()
	dial("127.0.0.1")
	within()
	past(dial("127.0.0.1"), "a third from one peer, with two from it open")
	dial("127.0.0.2")
	within()
	past(dial("127.0.0.3"), "a fourth in all, with three open")
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	_ = first.Close() // a second Close frees nothing more
	dial("127.0.0.1")
	within()
	past(dial("127.0.0.3"), "a fourth in all after one closed and another opened")
}
