//go:build linux

package edge

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
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
// mode on a proxy in front of a backend that answers every request but
// its health probes with bigAnswer.
func eachPlainBigAnswer(t *testing.T, f func(t *testing.T, m edgeMode, s *Server, d dialer)) {
	resp, _ := bigAnswer()
	eachPlainMode(t, func(rawReq) rawAnswer { return rawAnswer{resp: resp} }, f)
}

// eachPlainMode runs f, as a parallel subtest, for each plain edge mode
// (with and without write-behind; TLS writes never go through the ring)
// on a proxy in front of a backend that answers health probes 200 and
// every other request with answer.
func eachPlainMode(t *testing.T, answer func(rawReq) rawAnswer, f func(t *testing.T, m edgeMode, s *Server, d dialer)) {
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
				return answer(r)
			})
			s, d := startRawProxy(t, m, nil, func(c *Config) { c.Backends = []string{b.url("")} })
			f(t, m, s, d)
		})
	}
}

// sizedBody is n bytes whose every 16-byte line names its offset (the
// last line cut short), so that a byte lost, doubled or moved shows.
func sizedBody(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i += 16 {
		fmt.Fprintf(&b, "%015x\n", i)
	}
	return b.Bytes()[:n]
}

// TestWriteBehindRandomized: whatever mix of answers and clients, every
// client gets exactly the bytes its backend answered, in order, with
// write-behind as without. Answers of random sizes (empty, small, around
// the 16 KB above which a write is sent at once, up to 300 KB, and now
// and then over 4 MB, past what the sockets between hold), with a length
// or chunked in random pieces, to requests pipelined up to three at a
// time, on connections of which some read late through a 4 KB receive
// buffer (their sockets fill, and queued writes spill).
func TestWriteBehindRandomized(t *testing.T) {
	t.Parallel()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	const largest = 4<<20 + 256<<10
	pattern := sizedBody(largest) // every answer is a prefix of it
	answer := func(r rawReq) rawAnswer {
		n, _ := strconv.Atoi(r.fields("X-Size")[0])
		body := pattern[:n]
		if r.fields("X-Chunked")[0] != "1" {
			return rawAnswer{resp: fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", n, body)}
		}
		var w strings.Builder
		w.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		rng := rand.New(rand.NewPCG(uint64(n), uint64(len(r.head))))
		for len(body) > 0 {
			k := min(len(body), 1+rng.IntN(40<<10))
			fmt.Fprintf(&w, "%x\r\n%s\r\n", k, body[:k])
			body = body[k:]
		}
		w.WriteString("0\r\n\r\n")
		return rawAnswer{resp: w.String()}
	}
	eachPlainMode(t, answer, func(t *testing.T, _ edgeMode, s *Server, d dialer) {
		rng := rand.New(rand.NewPCG(uint64(seed), 54))
		type client struct {
			c    *rawConn
			slow bool
		}
		var cs []client
		for i := 0; i < 6; i++ {
			if i%2 == 0 {
				cs = append(cs, client{slowReader(t, s.Addr()), true})
			} else {
				cs = append(cs, client{d.dial(t), false})
			}
		}
		sizes := func() int {
			switch rng.IntN(10) {
			case 0:
				return 4<<20 + rng.IntN(largest-4<<20) // past what the sockets hold
			case 1, 2:
				return rng.IntN(200)
			case 3, 4:
				return 1<<10 + rng.IntN(12<<10)
			case 5, 6:
				return 15<<10 + rng.IntN(3<<10) // around maxBehind
			}
			return 100<<10 + rng.IntN(200<<10)
		}
		for round := 0; round < 30; round++ {
			cl := cs[rng.IntN(len(cs))]
			k := 1 + rng.IntN(3)
			var reqs strings.Builder
			want := make([]int, k)
			for i := range want {
				want[i] = sizes()
				reqs.WriteString(chatReq(fmt.Sprintf("X-Size: %d\r\nX-Chunked: %d\r\n", want[i], rng.IntN(2))))
			}
			cl.c.send(reqs.String()) // pipelined
			if cl.slow {
				time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
			}
			for i, n := range want {
				r := cl.c.read(false)
				if r.status != 200 || !bytes.Equal(r.body, pattern[:n]) {
					t.Fatalf("seed %d round %d answer %d of %d: status %d, %d bytes, want %d bytes as the backend sent them", seed, round, i+1, k, r.status, len(r.body), n)
				}
			}
		}
		waitIdle(t, s)
	})
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
