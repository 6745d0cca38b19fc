//go:build linux

package edge

import (
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Awaiting a body whole. An agent's 400 KB turn reaches the proxy in
// bursts (over loopback, one per 64 KB segment the sender's write is cut
// into), and each burst woke the loop: a blocking epoll_wait and a
// context switch a burst, the dearest thing a loop does on a virtual
// machine (five a request on the agent replay, most of them for the
// body). Raising the socket's low-water mark (SO_RCVLOWAT) to the rest of
// the body makes the kernel report it readable once the rest is in.
//
// Invariant: a socket's mark is never above the bytes still to come of
// the body being read, and never outlives it. A mark above them would
// never be met: the loop would sleep on a request whose bytes are all
// there until the client gave up. So each short read sets the mark to
// exactly the rest, lowers it to one byte once the rest is small, and the
// body's end lowers it before anything else is read from the socket.
//
// Below the mark the kernel still reports the socket readable when its
// receive window is nearly closed or its buffer nearly full, so a sender
// limited by the window is not held by it. What it cannot see is a sender
// that stops with a window open but smaller than its segment size, or one
// (with Nagle's algorithm on) that holds its last small segment until
// data it sent is acknowledged: those would wait for a persist or a
// delayed-acknowledgement timer, tens to hundreds of milliseconds. So a
// mark lasts at most --body-await (2 ms by default: a 1 MB body over a
// 10 Gbit/s link takes under one): then it is lowered, the socket is read at
// once if anything waits, and the rest of that body is read at every
// arrival (kvca_body_awaits_expired_total counts them).

// awaitMin is the least rest of a body worth awaiting whole: below it the
// two setsockopt calls cost about what the wake-ups they save do.
const awaitMin = 64 << 10

// markRec is a mark raised on s at at, numbered seq: it is still up while
// s.marked and s.markSeq == seq (a lowered mark leaves its record to be
// passed over, not searched for).
type markRec struct {
	s   *sock
	seq uint64
	at  int64
}

// awaitBody is called when s, in the middle of a body with rest bytes
// still to come, has been read dry.
func (l *evLoop) awaitBody(s *sock, rest int) {
	if s.tls != nil || s.spent || l.s.cfg.BodyAwait <= 0 {
		return
	}
	if rest < awaitMin {
		l.unmark(s) // what is left is small: read it as it comes
		return
	}
	if setRcvLowat(s.fd, rest) != 0 {
		l.unmark(s)
		return
	}
	if !s.marked {
		l.markSeq++
		s.marked, s.markSeq = true, l.markSeq
		l.marks = append(l.marks, markRec{s: s, seq: l.markSeq, at: l.now})
		l.nMarks++
		l.s.m.awaited.Inc()
	}
}

// bodyIn is called once s's body is in, before anything else is read
// from s: the mark goes, and the next body may be awaited again.
func (l *evLoop) bodyIn(s *sock) {
	l.unmark(s)
	s.spent = false
}

// unmark lowers s's mark to one byte (the kernel then reports the socket
// readable at once if anything waits).
func (l *evLoop) unmark(s *sock) {
	if s.marked {
		_ = setRcvLowat(s.fd, 1)
		l.dropMark(s)
	}
}

// dropMark forgets s's mark without a system call: its descriptor is
// about to be closed.
func (l *evLoop) dropMark(s *sock) {
	if !s.marked {
		return
	}
	s.marked = false
	if l.nMarks--; l.nMarks == 0 {
		clear(l.marks)
		l.marks, l.markHead = l.marks[:0], 0
	}
}

// firstMark returns the oldest mark still up, passing over lowered ones.
func (l *evLoop) firstMark() (markRec, bool) {
	for l.markHead < len(l.marks) {
		r := l.marks[l.markHead]
		if r.s.marked && r.s.markSeq == r.seq {
			return r, true
		}
		l.marks[l.markHead] = markRec{}
		l.markHead++
	}
	return markRec{}, false
}

// expireMarks lowers the marks up for --body-await or longer; their sockets
// are read at every arrival until their bodies are in.
func (l *evLoop) expireMarks() {
	for l.nMarks > 0 {
		r, ok := l.firstMark()
		if !ok || r.at+int64(l.s.cfg.BodyAwait) > l.now {
			break
		}
		r.s.spent = true
		l.unmark(r.s)
		l.s.m.awaitExpired.Inc()
	}
	if h := l.markHead; h > 64 && 2*h > len(l.marks) {
		n := copy(l.marks, l.marks[h:])
		clear(l.marks[n:])
		l.marks, l.markHead = l.marks[:n], 0
	}
}

// markWait bounds a blocking wait of ms milliseconds (-1: none) by the
// oldest mark's expiry, at least 1 ms (epoll's unit).
func (l *evLoop) markWait(ms int) int {
	if l.nMarks == 0 {
		return ms
	}
	r, ok := l.firstMark()
	if !ok {
		return ms
	}
	d := int((r.at + int64(l.s.cfg.BodyAwait) - l.now + int64(time.Millisecond) - 1) / int64(time.Millisecond))
	d = max(d, 1)
	if ms < 0 || d < ms {
		return d
	}
	return ms
}

// setRcvLowat sets fd's SO_RCVLOWAT with a raw call, as rawRead reads: it
// never blocks, so the loop keeps its P.
func setRcvLowat(fd, n int) syscall.Errno {
	v := int32(n)
	_, _, e := syscall.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, uintptr(unsafe.Pointer(&v)), 4, 0)
	return e
}
