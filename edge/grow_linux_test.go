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

// The loop's free buffers are what its traffic holds at once: a trim
// drops those no request took since the last one, and keeps the rest,
// most recently freed first out.
func TestTrimKeepsTheBuffersInUse(t *testing.T) {
	l := &evLoop{}
	const big = 1 << 20
	var held [][]byte
	for range 6 { // a burst: six 1 MB bodies at once
		held = append(held, l.getBuf(big))
	}
	for _, b := range held {
		l.putBuf(b)
	}
	k := bufClass(big)
	l.trimBufs() // the burst's low point was 0 free: all six stay
	if got := len(l.bufs[k]); got != 6 || l.bufBytes != 6*cap(held[0]) {
		t.Fatalf("after the burst: %d free, %d bytes", got, l.bufBytes)
	}
	// Then two at a time: four of the six are never taken.
	for range 10 {
		a, b := l.getBuf(big), l.getBuf(big)
		l.putBuf(a)
		l.putBuf(b)
	}
	l.trimBufs()
	if got := len(l.bufs[k]); got != 2 || l.bufBytes != 2*cap(held[0]) {
		t.Fatalf("after steady pairs: %d free, %d bytes, want 2", got, l.bufBytes)
	}
	for i, b := range l.bufs[k][:cap(l.bufs[k])] {
		if i >= 2 && b != nil {
			t.Fatal("a dropped buffer is still referenced")
		}
	}
	l.trimBufs() // nothing taken since: all go
	if len(l.bufs[k]) != 0 || l.bufBytes != 0 {
		t.Fatalf("idle: %d free, %d bytes", len(l.bufs[k]), l.bufBytes)
	}
}
