//go:build linux

package edge

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sock is a loop's non-blocking socket: plain, or TLS over it (tls.go).
type sock struct {
	fd int
	// rd: the socket may hold unread bytes. Edge-triggered epoll reports
	// each arrival once; a short read means the socket was drained, so the
	// next arrival raises a new event and no read has to end in EAGAIN.
	// Once the peer has hung up (hup) reads go on to the end of file,
	// which arrived with the last bytes and raises no event of its own.
	rd, hup bool
	tls     *tlsSock // nil: plain

	// Write-behind (the loop's io_uring, behind_linux.go): a plain socket's
	// small write is queued and sent with the round's others; until the
	// connection is told (an EPOLLOUT event after the round's Submit) it
	// counts as pending output, so the connection waits as it would for a
	// socket that took only part.
	wq    uint8
	werr  syscall.Errno // the queued send failed: the next write returns it
	spill []byte        // what a queued send's socket did not take, for EPOLLOUT

	// A body awaited whole (await_linux.go): SO_RCVLOWAT is raised, by
	// the loop's mark number markSeq; spent: this body's mark expired, and
	// the rest of it is read at every arrival.
	marked, spent bool
	markSeq       uint64
}

// read reads into p if bytes may be waiting; EAGAIN also means "not now,
// wait for an event".
func (s *sock) read(p []byte) (int, syscall.Errno) {
	if s.tls != nil {
		return s.tls.read(s, p)
	}
	if !s.rd {
		return 0, syscall.EAGAIN
	}
	n, e := rawRead(s.fd, p)
	if e == syscall.EAGAIN || (e == 0 && n > 0 && n < len(p) && !s.hup) {
		s.rd = false
	}
	return n, e
}

// mayRead makes the next read look at the socket whatever the events
// said (TLS may hold decrypted bytes no event will announce).
func (s *sock) mayRead() {
	if s.tls != nil {
		s.rd = true
	}
}

// writev writes a then b (either may be empty) and returns how many of
// their bytes were taken. Over TLS every byte is taken (encrypted), and
// what the socket could not take yet is pendingOut.
func (s *sock) writev(l *evLoop, a, b []byte) (int, syscall.Errno) {
	if s.tls != nil {
		return s.tls.writev(s, a, b)
	}
	if l.ring != nil {
		return l.writeBehind(s, a, b)
	}
	return l.rawWritev(s.fd, a, b)
}

// pendingOut reports bytes taken but not yet on the wire (TLS's, or
// write-behind's), or not yet reported sent to the connection.
func (s *sock) pendingOut() bool {
	if s.tls != nil {
		return s.tls.pending()
	}
	return s.wq != wqNone || len(s.spill) > 0
}

// flushOut, on EPOLLOUT, writes what pendingOut holds; EAGAIN is
// swallowed (pendingOut says so).
func (s *sock) flushOut(l *evLoop) syscall.Errno {
	if s.tls != nil {
		return s.tls.w.flush()
	}
	if _, e := s.writev(l, nil, nil); e != syscall.EAGAIN {
		return e
	}
	return 0
}

// Raw non-blocking system calls: they never block, so they keep the P.
// They are the socket calls (recvfrom, sendto, sendmsg), not read, write
// and writev: those go through the file layer first (position lock, access
// and permission checks), ~3.5% of kvca's CPU at 4 KB for nothing a
// socket needs. MSG_NOSIGNAL: a peer that has gone is an EPIPE, not a
// SIGPIPE for the runtime to field.
func rawRead(fd int, p []byte) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), 0, 0, 0)
		if e == 0 {
			return int(n), 0
		}
		if e != syscall.EINTR {
			return 0, e
		}
	}
}

func rawWrite(fd int, p []byte) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), syscall.MSG_NOSIGNAL, 0, 0)
		if e == 0 {
			return int(n), 0
		}
		if e != syscall.EINTR {
			return 0, e
		}
	}
}

// rawWritev writes a then b (either may be empty) and returns how many
// bytes went out.
func (l *evLoop) rawWritev(fd int, a, b []byte) (int, syscall.Errno) {
	n := 0
	if len(a) > 0 {
		l.iov[n].Base = &a[0]
		l.iov[n].SetLen(len(a))
		n++
	}
	if len(b) > 0 {
		l.iov[n].Base = &b[0]
		l.iov[n].SetLen(len(b))
		n++
	}
	if n == 0 {
		return 0, 0
	}
	if n == 2 && len(a)+len(b) <= len(l.small) {
		// A head and a short body (most answers): copied into one piece
		// and sent with sendto, which costs less than sendmsg's two
		// vectors. The bytes taken count the same way.
		l.iov[0].Base, l.iov[1].Base = nil, nil
		k := copy(l.small[:], a)
		k += copy(l.small[k:], b)
		return rawWrite(fd, l.small[:k])
	}
	if n == 1 {
		p := a
		if len(p) == 0 {
			p = b
		}
		l.iov[0].Base = nil
		return rawWrite(fd, p)
	}
	l.msg.Iov = &l.iov[0]
	l.msg.SetIovlen(n)
	for {
		r, _, e := syscall.RawSyscall(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&l.msg)), syscall.MSG_NOSIGNAL)
		if e != syscall.EINTR {
			l.iov[0].Base, l.iov[1].Base = nil, nil
			l.msg.Iov = nil
			if e != 0 {
				return 0, e
			}
			return int(r), 0
		}
	}
}
