//go:build linux

package edge

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestBodyAwaitedWhole: a large body that arrives in bursts is awaited
// whole (SO_RCVLOWAT on a plain socket, not on TLS), reaches the backend
// byte for byte, and the mark is gone once it is in: the next requests on
// the connection, one sent in the same write as the body's end, are
// answered at their first bytes. Without the reset the small request
// after it would wait for 64 KB that never come.
func TestBodyAwaitedWhole(t *testing.T) {
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			b := newRawBackend(t, nil)
			s, d := startRawProxy(t, m, nil, func(c *Config) { c.Backends = []string{b.url("")} })
			body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"%s"}]}`, strings.Repeat("a tool's long result. ", 24<<10))
			head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
			small := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
			next := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(small), small)
			c := d.dial(t)
			for round := 0; round < 2; round++ {
				c.send(head + body[:20<<10])
				awaiting := func() int {
					return countConns(t, s, func(c *cliConn) bool { return c.state == cliBody && c.sock.lowat })
				}
				inBody := func() int { return countConns(t, s, func(c *cliConn) bool { return c.state == cliBody }) }
				deadline := time.Now().Add(10 * time.Second)
				for inBody() == 0 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				want := 1
				if m.tls {
					want = 0
				}
				if got := awaiting(); got != want {
					t.Fatalf("round %d: %d connections await the body whole, want %d", round, got, want)
				}
				c.send(body[20<<10 : 200<<10])
				time.Sleep(20 * time.Millisecond)
				// The rest and the next request in one write: the mark must
				// not hold the next request back.
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
				if got := awaiting(); got != 0 {
					t.Fatalf("round %d: %d connections still await a body", round, got)
				}
				c.open() // a head alone, at its first bytes
			}
		})
	}
}
