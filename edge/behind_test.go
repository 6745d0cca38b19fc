//go:build linux

package edge

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/kvca/kvca/internal/testkit"
	"github.com/kvca/kvca/uring"
)

// ringWorks reports whether this kernel lets a process use io_uring, so
// that a test can tell write-behind's batching from its fallback.
func ringWorks() bool {
	r, err := uring.New(4, 1024)
	if err != nil {
		return false
	}
	r.Close()
	return true
}

// slowReader dials the proxy with a 4 KB receive buffer: a client whose
// socket fills after a few of kvca's writes.
func slowReader(t *testing.T, addr string) *rawConn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return &rawConn{testkit.Wrap(t, nc), t}
}

// bigAnswer is a 4 MB answer whose every 16-byte line names its offset,
// so that a byte lost, doubled or moved shows where.
func bigAnswer() (string, []byte) {
	var body bytes.Buffer
	for i := 0; body.Len() < 4<<20; i += 16 {
		fmt.Fprintf(&body, "%015x\n", i)
	}
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", body.Len()) + body.String(), body.Bytes()
}

// eachPlainBigAnswer runs f, as a parallel subtest, for each plain edge
// mode (with and without write-behind; TLS writes never go through the
// ring) on a proxy in front of a backend that answers every request but
// its health probes with bigAnswer.
func eachPlainBigAnswer(t *testing.T, f func(t *testing.T, m edgeMode, s *Server, d dialer)) {
	resp, _ := bigAnswer()
	for _, m := range edgeModes {
		if m.tls {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := newRawBackend(t, func(r rawReq) rawAnswer {
				if r.line() == "GET /health HTTP/1.1" {
					return rawAnswer{resp: okJSON}
				}
				return rawAnswer{resp: resp}
			})
			s, d := startRawProxy(t, m, nil, func(c *Config) { c.Backends = []string{b.url("")} })
			f(t, m, s, d)
		})
	}
}

// TestWriteBehindFullSocket: an answer to a client that does not read
// fills its socket; the writes the socket did not take wait for it, and
// the client gets every byte in order, then the connection serves the
// next request. With write-behind the waiting part is a queued send's
// rest (the socket's spill); without, a short send call's.
func TestWriteBehindFullSocket(t *testing.T) {
	t.Parallel()
	_, want := bigAnswer()
	eachPlainBigAnswer(t, func(t *testing.T, m edgeMode, s *Server, _ dialer) {
		for round := 0; round < 2; round++ {
			c := slowReader(t, s.Addr())
			c.send(chatReq(""))
			time.Sleep(300 * time.Millisecond) // the sockets fill
			r := c.read(false)
			if r.status != 200 {
				t.Fatalf("status %d", r.status)
			}
			if !bytes.Equal(r.body, want) {
				i := 0
				for i < len(r.body) && i < len(want) && r.body[i] == want[i] {
					i++
				}
				t.Fatalf("body of %d bytes differs from the backend's %d from byte %d", len(r.body), len(want), i)
			}
			c.open()
		}
		waitIdle(t, s)
		sends := s.m.ringSends.Get()
		switch {
		case m.noRing && sends != 0:
			t.Fatalf("%d writes went through io_uring with it off", sends)
		case !m.noRing && ringWorks() && sends == 0:
			t.Fatal("no write went through io_uring")
		}
	})
}

// TestWriteBehindClientResets: a client that resets while its answer
// waits for room in its socket ends the exchange: the backend's load is
// released once, and the proxy serves the next client.
func TestWriteBehindClientResets(t *testing.T) {
	t.Parallel()
	eachPlainBigAnswer(t, func(t *testing.T, _ edgeMode, s *Server, d dialer) {
		for i := 0; i < 3; i++ {
			c := slowReader(t, s.Addr())
			c.send(chatReq(""))
			time.Sleep(100 * time.Millisecond)
			if err := c.Conn.Conn.(*net.TCPConn).SetLinger(0); err != nil {
				t.Fatal(err)
			}
			c.Conn.Conn.Close()
		}
		waitIdle(t, s)
		c := d.dial(t)
		c.open()
		if n := s.m.disconnects.Get(); n != 3 {
			t.Fatalf("%d client disconnects counted, want 3", n)
		}
	})
}
