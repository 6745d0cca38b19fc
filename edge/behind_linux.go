//go:build linux

package edge

import (
	"syscall"

	"github.com/kvca/kvca/uring"
)

// Write-behind: a loop's small writes to plain sockets are queued on its
// io_uring while it works through a round of events, and the whole round
// goes out with one system call at the end of it, where a send each cost
// one call each (two a request: the request upstream, the answer to the
// client). The sends are MSG_DONTWAIT, so the call never waits; their
// outcomes are known when it returns.
//
// A connection sees the same socket as before: a queued write is taken
// whole, and counts as pending output until the round's Submit has sent
// it and the connection has been told with an EPOLLOUT event, which is
// what it waits for when a socket takes only part of a write. A send the
// socket took only part of leaves the rest in the socket's spill, written
// on the next real EPOLLOUT; a failed one returns its error at the next
// write. A socket's queued write is sent before the socket is shut down
// or closed (settle), and a socket has at most one queued write, so the
// order of its bytes never changes.

// State of a socket's write-behind (sock.wq).
const (
	wqNone   uint8 = iota
	wqQueued       // in the round's batch, not yet sent
	wqSent         // sent (or failed); its connection has not been told yet
)

// maxBehind: larger writes are sent at once, as before; copying them
// into the ring's arena would cost more than the call saved.
const maxBehind = loopBufSize

// Ring size: sends a round can queue before a Submit is forced, and the
// arena their bytes are copied into.
const (
	ringEntries = 256
	ringArena   = 256 << 10
)

// notice is a connection to tell that its queued write went out.
type notice struct {
	s *sock
	h evHandler
}

// writeBehind is sock.writev over the loop's ring.
func (l *evLoop) writeBehind(s *sock, a, b []byte) (int, syscall.Errno) {
	if s.wq == wqQueued {
		if len(a)+len(b) == 0 {
			return 0, 0 // on its way: pendingOut says so
		}
		l.submit() // one queued write per socket keeps its bytes in order
	}
	if s.wq == wqSent {
		s.wq = wqNone // a write after the send: the connection knows
	}
	if s.werr != 0 {
		return 0, s.werr
	}
	for len(s.spill) > 0 {
		n, e := rawWrite(s.fd, s.spill)
		if e != 0 {
			return 0, e
		}
		s.spill = s.spill[n:]
	}
	s.spill = nil
	n := len(a) + len(b)
	if n == 0 {
		return 0, 0
	}
	if n > maxBehind {
		return l.rawWritev(s.fd, a, b)
	}
	if !l.ring.Send(s.fd, a, b, uint32(len(l.behind))) {
		l.submit() // the ring or its arena is full
		if !l.ring.Send(s.fd, a, b, 0) {
			return l.rawWritev(s.fd, a, b)
		}
	}
	l.behind = append(l.behind, s)
	s.wq = wqQueued
	return n, 0
}

// submit sends the queued writes and records each outcome on its socket.
func (l *evLoop) submit() {
	res := l.ring.Submit()
	l.s.m.ringSubmits.Inc()
	l.s.m.ringSends.Add(len(res))
	for _, r := range res {
		s := l.behind[r.Tag]
		switch {
		case r.Err == 0 && r.Rest == nil:
		case r.Rest != nil:
			// The socket is full: the rest waits for its EPOLLOUT, which
			// the connection waits for too (pendingOut).
			s.spill = append([]byte(nil), r.Rest...)
			s.wq = wqNone
			continue
		default:
			s.werr = r.Err
		}
		s.wq = wqSent
		var h evHandler
		if s.fd < len(l.fds) {
			h = l.fds[s.fd].h
		}
		l.told = append(l.told, notice{s: s, h: h})
	}
	clear(l.behind)
	l.behind = l.behind[:0]
}

// settle sends s's queued write now: its socket is about to be shut down
// or closed.
func (l *evLoop) settle(s *sock) {
	if s.wq == wqQueued {
		l.submit()
	}
}

// endRound sends what the round queued and tells each connection whose
// write went out; what they do then (the next request, the next piece
// of a stream) may queue more, sent in turn before the loop waits again.
func (l *evLoop) endRound() {
	for len(l.behind) > 0 || len(l.told) > 0 {
		if len(l.behind) > 0 {
			l.submit()
		}
		told := l.told
		l.told = l.telling[:0]
		for i, t := range told {
			// Not if the connection closed, or wrote again, since.
			if t.h != nil && t.s.wq == wqSent && l.fds[t.s.fd].h == t.h {
				l.event(t.h, syscall.EPOLLOUT, false)
			}
			told[i] = notice{}
		}
		l.telling = told[:0]
	}
}

// startRing gives l its ring unless io_uring is off or refused; without
// one every write is its own system call.
func (l *evLoop) startRing() {
	if l.s.cfg.NoIOUring {
		return
	}
	r, err := uring.New(ringEntries, ringArena)
	if err != nil {
		l.s.log.Debug("event loop: io_uring unavailable; one send call a write", "err", err)
		return
	}
	l.ring = r
}

func (l *evLoop) stopRing() {
	if l.ring != nil {
		l.ring.Close()
		l.ring = nil
	}
}
