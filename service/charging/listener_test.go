package charging_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/dabom/dpcs/service/charging"
)

// Past the bound, a connection is closed as soon as it is accepted (its
// client reads the end at once) and counted; one closed frees its place.
func TestLimitConnections(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan struct{}, 4)
	ln := charging.LimitConnections(inner, 2, func() { refused <- struct{}{} })
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
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", inner.Addr().String())
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
			t.Fatal("a connection within the bound was not accepted")
		}
		return nil
	}
	dial()
	first := within()
	dial()
	within()
	third := dial()
	select {
	case <-refused:
	case <-time.After(10 * time.Second):
		t.Fatal("the third connection was not refused")
	}
	_ = third.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := third.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Errorf("the refused connection's client read %v, want its end", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	_ = first.Close() // a second Close frees nothing more
	dial()
	within()
	dial()
	select {
	case <-refused:
	case c := <-accepted:
		t.Errorf("a third connection open at once: accepted %v", c.RemoteAddr())
	case <-time.After(10 * time.Second):
		t.Fatal("the third connection open at once was neither accepted nor refused")
	}
}

// isReset reports whether err is a connection reset by the peer.
func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "read"
}
