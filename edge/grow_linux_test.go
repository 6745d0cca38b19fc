package edge

import "testing"

// A request buffer grows with the bytes received: four times at a step,
// and straight to the whole request once its Content-Length is at most 32
// times what arrived; a chunked body, whose limit is only a bound, never
// jumps.
func TestGrowJumpsToTheRequest(t *testing.T) {
	l := &evLoop{s: &Server{cfg: Config{MaxBodyBytes: 64 << 20}}}
	full := func(c *cliConn) {
		c.n = len(c.buf)
		if !c.grow() {
			t.Fatal("grow refused")
		}
	}
	c := &cliConn{l: l, state: cliBody}
	c.buf = l.getBuf(loopBufSize)
	c.h.Size = 300
	c.reqEnd = 300 + 1<<20 // a 1 MB body
	full(c)
	if len(c.buf) != 4*loopBufSize {
		t.Fatalf("16 KB of a 1 MB request grew to %d, want four times", len(c.buf))
	}
	full(c)
	if len(c.buf) < c.reqEnd || len(c.buf) > 2*c.reqEnd {
		t.Fatalf("64 KB of a 1 MB request grew to %d, want the whole request", len(c.buf))
	}

	ch := &cliConn{l: l, state: cliBody}
	ch.buf = l.getBuf(loopBufSize)
	ch.h.Size, ch.h.Chunked = 300, true
	l.s.cfg.MaxBodyBytes = 100 << 10 // a limit within 32 times 16 KB
	full(ch)
	if len(ch.buf) != 4*loopBufSize {
		t.Fatalf("a chunked body grew to %d, want four times", len(ch.buf))
	}
}
