//go:build linux

package edge

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kvca/kvca/internal/testkit"
	"golang.org/x/sys/unix"
)

// awaitRequest is a chat request whose body is about size bytes.
func awaitRequest(size int, tag string) (head, body string) {
	pad := max(size-64, 1)
	body = fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"%s %s"}]}`, tag, strings.Repeat("x", pad))
	head = fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	return head, body
}

// TestBodyAwaitedWhole: a large body that arrives in bursts is awaited
// whole on a plain socket (not over TLS), reaches the backend byte for
// byte, and its mark is gone once it is in: the next requests on the
// connection, one sent in the same write as the body's end, are answered
// at their first bytes. The wait never runs out here, so a mark left up
// would hold the next request until the client's read deadline.
func TestBodyAwaitedWhole(t *testing.T) {
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			b := newRawBackend(t, nil)
			s, d := startRawProxy(t, m, nil, func(c *Config) {
				c.Backends = []string{b.url("")}
				c.BodyAwait = time.Hour
			})
			head, body := awaitRequest(560<<10, "a tool's long result")
			small := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
			next := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(small), small)
			c := d.dial(t)
			for round := 0; round < 2; round++ {
				before := s.m.awaited.Get()
				c.send(head + body[:20<<10])
				if !m.tls {
					testkit.WaitUntil(t, "the body awaited", func() bool { return s.m.awaited.Get() > before })
				}
				c.send(body[20<<10 : 200<<10])
				time.Sleep(5 * time.Millisecond)
				c.send(body[200<<10:] + next)
				if r := c.read(false); r.status != 200 {
					t.Fatalf("round %d: the large request: %d %q", round, r.status, r.body)
				}
				if got := b.next(t); !bytes.Equal(got.body, []byte(body)) {
					t.Fatalf("round %d: the backend got %d bytes, want the %d sent", round, len(got.body), len(body))
				}
				if r := c.read(false); r.status != 200 {
					t.Fatalf("round %d: the request after it: %d %q", round, r.status, r.body)
				}
				if got := b.next(t); string(got.body) != small {
					t.Fatalf("round %d: the backend got %q", round, got.body)
				}
				if n := countConns(t, s, func(c *cliConn) bool { return c.sock.marked }); n != 0 {
					t.Fatalf("round %d: %d connections still await a body", round, n)
				}
				c.open() // a head alone, answered at its first bytes
			}
			if m.tls && s.m.awaited.Get() != 0 {
				t.Fatalf("%d bodies awaited over TLS", s.m.awaited.Get())
			}
		})
	}
}

// TestBodyAwaitExpires: a client that stops in the middle of a large body
// holds its mark for at most the wait's bound; then the mark is lowered,
// the rest is read as it comes, and the next body on the connection is
// awaited again.
func TestBodyAwaitExpires(t *testing.T) {
	b := newRawBackend(t, nil)
	s, d := startRawProxy(t, edgeModes[0], nil, func(c *Config) { c.Backends = []string{b.url("")} })
	c := d.dial(t)
	for round := 0; round < 2; round++ {
		head, body := awaitRequest(300<<10, fmt.Sprint("round ", round))
		c.send(head + body[:20<<10])
		testkit.WaitUntil(t, "the wait to run out", func() bool { return s.m.awaitExpired.Get() > uint64(round) })
		if got := s.m.awaited.Get(); got != uint64(round+1) {
			t.Fatalf("round %d: %d bodies awaited, want %d", round, got, round+1)
		}
		if n := countConns(t, s, func(c *cliConn) bool { return c.sock.marked }); n != 0 {
			t.Fatalf("round %d: a mark is still up after its wait ran out", round)
		}
		// In pieces: the spent body is not awaited again.
		for off := 20 << 10; off < len(body); off += 70 << 10 {
			c.send(body[off:min(off+70<<10, len(body))])
		}
		if r := c.read(false); r.status != 200 {
			t.Fatalf("round %d: %d %q", round, r.status, r.body)
		}
		if got := b.next(t); !bytes.Equal(got.body, []byte(body)) {
			t.Fatalf("round %d: the backend got %d bytes, want the %d sent", round, len(got.body), len(body))
		}
		if got := s.m.awaited.Get(); got != uint64(round+1) {
			t.Fatalf("round %d: %d bodies awaited after the rest, want %d", round, got, round+1)
		}
	}
}

// TestAwaitMarkNeverAboveRestRandomized holds the mark to its invariant
// under random traffic: bodies from 1 KB to 700 KB, some chunked, cut
// into random pieces with random pauses (some longer than the wait's
// bound), the next request sometimes in the same write as a body's end,
// on several connections at once. After every piece, every connection's
// socket has a mark of one byte, or (in the middle of a Content-Length
// body) at most the bytes of it not yet read; every request is answered
// 200 and reaches the backend byte for byte.
//
// With a wait of a minute, no request may rely on the wait running out:
// a mark left above what is still to come would hold its request until
// the read's deadline.
func TestAwaitMarkNeverAboveRestRandomized(t *testing.T) {
	for _, wait := range []time.Duration{DefaultConfig().BodyAwait, time.Minute} {
		t.Run(wait.String(), func(t *testing.T) { awaitMarksRandomized(t, wait) })
	}
}

func awaitMarksRandomized(t *testing.T, wait time.Duration) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>7))
	b := newRawBackend(t, nil)
	s, d := startRawProxy(t, edgeModes[0], nil, func(c *Config) {
		c.Backends = []string{b.url("")}
		c.BodyAwait = wait
	})

	type conn struct {
		c      *rawConn
		pieces []string // what is left to send of its current requests
		want   []string // their bodies, in order
	}
	const nConns, perConn = 4, 6
	conns := make([]*conn, nConns)
	for i := range conns {
		conns[i] = &conn{c: d.dial(t)}
	}
	sizes := []int{1 << 10, 40 << 10, 70 << 10, 130 << 10, 400 << 10, 700 << 10}
	// plan gives k its next one or two requests (the second pipelined
	// after the first's body), cut into pieces.
	plan := func(k *conn, n int) {
		var wire strings.Builder
		for j := 0; j < 1+rng.IntN(2); j++ {
			head, body := awaitRequest(sizes[rng.IntN(len(sizes))], fmt.Sprint("c", n, " r", j))
			if rng.IntN(5) == 0 {
				var ch strings.Builder
				for off := 0; off < len(body); off += 50 << 10 {
					part := body[off:min(off+50<<10, len(body))]
					fmt.Fprintf(&ch, "%x\r\n%s\r\n", len(part), part)
				}
				ch.WriteString("0\r\n\r\n")
				head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
				wire.WriteString(head + ch.String())
			} else {
				wire.WriteString(head + body)
			}
			k.want = append(k.want, body)
		}
		w := wire.String()
		for len(w) > 0 {
			n := min(len(w), 1+rng.IntN(len(w)/2+1))
			if rng.IntN(3) == 0 {
				n = len(w)
			}
			k.pieces = append(k.pieces, w[:n])
			w = w[n:]
		}
	}
	seen := 0 // marks above one byte read back from the kernel
	checkMarks := func(step int) {
		countConns(t, s, func(c *cliConn) bool {
			v, err := unix.GetsockoptInt(c.sock.fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT)
			if err != nil {
				return false // closed under us: nothing to hold
			}
			rest := 1
			if c.state == cliBody && !c.h.Chunked {
				rest = max(c.reqEnd-c.n, 1)
			}
			if v > rest {
				t.Errorf("step %d: a mark of %d bytes with %d still to read (state %d)", step, v, rest, c.state)
			}
			if v > 1 {
				seen++
			}
			if (v > 1) != c.sock.marked {
				t.Errorf("step %d: the kernel's mark is %d, the loop's record says marked=%v", step, v, c.sock.marked)
			}
			return false
		})
	}
	done := make([]int, nConns)
	got := map[string]int{} // bodies the backend received, not yet matched
	for step := 0; ; step++ {
		var open []int
		for i, k := range conns {
			if len(k.pieces) == 0 && done[i] < perConn {
				plan(k, done[i])
				done[i] += len(k.want)
			}
			if len(k.pieces) > 0 {
				open = append(open, i)
			}
		}
		if len(open) == 0 {
			break
		}
		k := conns[open[rng.IntN(len(open))]]
		k.c.send(k.pieces[0])
		k.pieces = k.pieces[1:]
		switch rng.IntN(4) {
		case 0:
			time.Sleep(3 * time.Millisecond) // past the wait's bound
		case 1:
			time.Sleep(200 * time.Microsecond)
		}
		checkMarks(step)
		if len(k.pieces) == 0 {
			for range k.want {
				if r := k.c.read(false); r.status != 200 {
					t.Fatalf("step %d: %d %q", step, r.status, r.body)
				}
			}
			// Answered, so recorded by the backend (other connections'
			// requests may have reached it first).
			for drained := false; !drained; {
				select {
				case r := <-b.reqs:
					got[string(r.body)]++
				default:
					drained = true
				}
			}
			for _, want := range k.want {
				if got[want] == 0 {
					t.Fatalf("step %d: a body of %d bytes did not reach the backend as sent", step, len(want))
				}
				got[want]--
			}
			k.want = k.want[:0]
			checkMarks(step)
		}
	}
	if s.m.awaited.Get() == 0 {
		t.Fatal("no body was awaited whole: the test proves nothing")
	}
	t.Logf("%d bodies awaited, %d waits ran out", s.m.awaited.Get(), s.m.awaitExpired.Get())
	if wait == time.Minute {
		if s.m.awaitExpired.Get() != 0 {
			t.Fatalf("%d waits of a minute ran out", s.m.awaitExpired.Get())
		}
		// The kernel really held a mark the checks read: a kernel that
		// ignored SO_RCVLOWAT would leave them checking nothing.
		if seen == 0 {
			t.Fatal("no check saw a mark up")
		}
	}
}

// TestBodyAwaitClientHangsUp: a client that half-closes in the middle of
// an awaited body is seen at once, whatever the mark (the kernel reports
// the end of the stream below it), even with a wait that never runs out:
// the connection is closed and nothing reaches the backend.
func TestBodyAwaitClientHangsUp(t *testing.T) {
	b := newRawBackend(t, nil)
	s, d := startRawProxy(t, edgeModes[0], nil, func(c *Config) {
		c.Backends = []string{b.url("")}
		c.BodyAwait = time.Hour
	})
	head, body := awaitRequest(300<<10, "cut short")
	c := d.dial(t)
	c.send(head + body[:20<<10])
	testkit.WaitUntil(t, "the body awaited", func() bool { return s.m.awaited.Get() == 1 })
	c.send(body[20<<10 : 100<<10])
	if err := c.Conn.Conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.closed()
	b.none(t)
	if n := countConns(t, s, func(c *cliConn) bool { return c.sock.marked }); n != 0 {
		t.Fatalf("%d marks still up", n)
	}
}
