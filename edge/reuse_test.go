//go:build linux

package edge

import (
	"sync"
	"testing"
	"time"
)

// Upstream connection hygiene: a connection is never reused after the
// backend said it ends, and a pooled connection the backend dropped is
// replaced without a failure.

const upstreamErrors = "kvca_upstream_errors_total{"

// TestConnectionCloseAnswersNeverFail: a backend that answers with
// Connection: close (fixed-length or chunked), three times in a row,
// closing or not, causes no failed request, no ejection, no error
// counted, and no request on a connection it said was ending.
func TestConnectionCloseAnswersNeverFail(t *testing.T) {
	t.Parallel()
	answers := map[string]string{
		"fixed":   "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"chunked": "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n7\r\ndata: x\r\n2\r\n\n\n\r\n0\r\n\r\n",
		"1.0":     "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
	}
	for _, m := range edgeModes {
		for name, answer := range answers {
			for _, closing := range []bool{true, false} {
				t.Run(m.name+"/"+name+"/closing="+map[bool]string{true: "yes", false: "no"}[closing], func(t *testing.T) {
					t.Parallel()
					b := newRawBackend(t, func(rawReq) rawAnswer { return rawAnswer{resp: answer, close: closing} })
					s, d := startRawProxy(t, m, nil, func(c *Config) {
						c.Backends = []string{b.url("")}
						c.Loops = 1 // one pool: a connection put back would be the next one drawn
						c.HealthInterval = 10 * time.Millisecond
						c.FailThreshold = 1
					})
					c := d.dial(t)
					seen := map[int]bool{}
					for i := 0; i < 3; i++ {
						for _, req := range []string{chatReq(""), "GET /v1/files HTTP/1.1\r\nHost: x\r\n\r\n"} {
							c.send(req)
							up := b.next(t)
							r := c.read(false)
							if r.status != 200 {
								t.Fatalf("request %d: status %d: %q", i, r.status, r.body)
							}
							if seen[up.conn] {
								t.Fatalf("request %d came on backend connection %d, which had answered Connection: close", i, up.conn)
							}
							seen[up.conn] = true
						}
						// Health probes run meanwhile and must not find the
						// backend down either.
						waitProbe(t, b)
					}
					if !s.fleet().sched.Backends[0].Healthy() {
						t.Fatal("backend ejected")
					}
					if n := metricSum(t, s, upstreamErrors); n != 0 {
						t.Fatalf("%v upstream errors counted", n)
					}
					c.open()
				})
			}
		}
	}
}

// waitProbe waits for a health probe answered from now on.
func waitProbe(t *testing.T, b *rawBackend) {
	t.Helper()
	for len(b.health) > 0 {
		<-b.health
	}
	select {
	case <-b.health:
	case <-time.After(10 * time.Second):
		t.Fatal("no health probe")
	}
}

// TestCloseDelimitedBody: an answer without a length ends when the
// backend closes; the client gets all of it and a connection that ends
// too, and the next request gets a new backend connection.
func TestCloseDelimitedBody(t *testing.T) {
	t.Parallel()
	const body = "event stream delimited by the close\n"
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := newRawBackend(t, func(rawReq) rawAnswer {
				return rawAnswer{resp: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n" + body, close: true}
			})
			s, d := startRawProxy(t, m, nil, func(c *Config) { c.Backends = []string{b.url("")}; c.Loops = 1 })
			seen := map[int]bool{}
			for i := 0; i < 3; i++ {
				for _, req := range []string{chatReq(""), "GET /v1/files HTTP/1.1\r\nHost: x\r\n\r\n"} {
					c := d.dial(t)
					c.send(req)
					up := b.next(t)
					r := c.read(false)
					if r.status != 200 || string(r.body) != body || r.field("Connection") != "close" || r.field("Content-Length") != "" {
						t.Fatalf("status %d, %q, body %q", r.status, r.head, r.body)
					}
					c.closed()
					if seen[up.conn] {
						t.Fatalf("backend connection %d reused after a close-delimited body", up.conn)
					}
					seen[up.conn] = true
				}
			}
			if n := metricSum(t, s, upstreamErrors); n != 0 {
				t.Fatalf("%v upstream errors counted", n)
			}
		})
	}
}

// TestIdleConnectionDroppedByBackend: a pooled connection the backend
// closed while it was idle is replaced by a fresh one, and no error is
// counted.
func TestIdleConnectionDroppedByBackend(t *testing.T) {
	t.Parallel()
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := newRawBackend(t, nil)
			s, d := startRawProxy(t, m, nil, func(c *Config) { c.Backends = []string{b.url("")}; c.Loops = 1 })
			c := d.dial(t)
			last := -1
			for i := 0; i < 6; i++ {
				c.send([]string{chatReq(""), "GET /v1/files HTTP/1.1\r\nHost: x\r\n\r\n"}[i%2])
				up := b.next(t)
				if r := c.read(false); r.status != 200 {
					t.Fatalf("request %d: status %d %q", i, r.status, r.body)
				}
				if up.conn == last {
					t.Fatalf("request %d on a connection the backend had closed", i)
				}
				last = up.conn
				b.CloseConns()
			}
			if n := metricSum(t, s, upstreamErrors); n != 0 {
				t.Fatalf("%v upstream errors counted", n)
			}
			if !s.fleet().sched.Backends[0].Healthy() {
				t.Fatal("backend ejected")
			}
		})
	}
}

// TestStalePooledConnectionRetried: a backend that closes a kept-alive
// connection when the next request arrives on it, without answering (the
// race every keep-alive client meets), costs the client nothing: the
// request is sent again on a fresh connection, and no error is counted.
func TestStalePooledConnectionRetried(t *testing.T) {
	t.Parallel()
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			served := map[int]int{}
			b := newRawBackend(t, func(r rawReq) rawAnswer {
				mu.Lock()
				defer mu.Unlock()
				served[r.conn]++
				if served[r.conn] > 1 {
					return rawAnswer{close: true} // drops it unanswered
				}
				return rawAnswer{resp: okJSON}
			})
			s, d := startRawProxy(t, m, nil, func(c *Config) {
				c.Backends = []string{b.url("")}
				c.Loops = 1
				c.FailThreshold = 1
			})
			c := d.dial(t)
			for i := 0; i < 4; i++ {
				req := []string{chatReq(""), "GET /v1/files HTTP/1.1\r\nHost: x\r\n\r\n"}[i%2]
				c.send(req)
				first := b.next(t)
				if i > 0 {
					// The first try went on the kept-alive connection and
					// was dropped; the same request comes again, fresh.
					again := b.next(t)
					if again.conn == first.conn || again.head != first.head || string(again.body) != string(first.body) {
						t.Fatalf("request %d: retry on connection %d (first on %d): %q", i, again.conn, first.conn, again.head)
					}
				}
				if r := c.read(false); r.status != 200 {
					t.Fatalf("request %d: status %d %q", i, r.status, r.body)
				}
			}
			if n := metricSum(t, s, upstreamErrors); n != 0 {
				t.Fatalf("%v upstream errors counted", n)
			}
			if !s.fleet().sched.Backends[0].Healthy() {
				t.Fatal("backend ejected")
			}
		})
	}
}
