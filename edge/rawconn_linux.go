package edge

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// rawConn is a TCP connection whose reads and writes are made as raw
// system calls from inside the poller's callback (syscall.RawConn), instead
// of through net.Conn's syscall.Syscall.
//
// Why: a socket read or write on loopback runs the peer's whole receive
// path in the kernel and, on a loaded machine, the thread is often
// descheduled inside it. A goroutine in syscall.Syscall leaves its P in
// the syscall state, and when that lasts past one sysmon tick (20 µs) with
// the other Ps busy, sysmon retakes the P and hands it to another thread
// (a futex wake-up), the returning thread finds no P and parks (another
// futex), and every such retake keeps sysmon itself polling every 20 µs
// instead of backing off to 10 ms. Profiles of kvca serve under wrk put
// 15–20% of its CPU there (sysmon's nanosleeps, findRunnable, futex). The
// sockets are non-blocking, so none of these calls can block: keeping the
// P through them is what RawSyscall is for. Readiness waits, deadlines and
// closing still go through the poller (RawConn.Read and Write wait on it
// when the callback reports EAGAIN), so behaviour is that of net.Conn.
//
// Deadlines are lazy when they move later: fasthttp sets two read
// deadlines per request on the client connection (idle, then read timeout)
// and kvca one per upstream request, each a runtime timer update. A
// deadline that is earlier than the one on the socket (or the first one) is
// applied at once, so it still interrupts a blocked call; a later one, or
// none, is only recorded. The socket's deadline is therefore never later
// than the wanted one: when it fires before the wanted deadline, Read or
// Write applies the wanted one and carries on, so callers see the
// deadlines they set, as with net.Conn.
//
// Reads and writes may run concurrently (each has its own state); two
// concurrent reads (or writes) are serialised by the poller's fd locks.
type rawConn struct {
	*net.TCPConn
	rc syscall.RawConn

	dmu       sync.Mutex
	rdWant    time.Time // the read deadline the caller set (zero: none)
	rdApplied time.Time // the read deadline on the socket, never after rdWant
	wdWant    time.Time
	wdApplied time.Time

	rp    []byte // the current read's buffer
	rn    int
	rerr  syscall.Errno
	readF func(uintptr) bool

	wp     []byte // what is left of the current write
	wn     int
	werr   syscall.Errno
	writeF func(uintptr) bool
}

// wrapConn returns c with raw-syscall reads and writes if it is a TCP
// connection, else c itself.
func wrapConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	r := &rawConn{TCPConn: tc, rc: rc}
	r.readF = r.readRaw
	r.writeF = r.writeRaw
	return r
}

func (c *rawConn) readRaw(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rp[0])), uintptr(len(c.rp)))
		switch e {
		case 0:
			c.rn = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait for readiness in the poller
		default:
			c.rerr = e
			return true
		}
	}
}

func (c *rawConn) writeRaw(fd uintptr) bool {
	for len(c.wp) > 0 {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&c.wp[0])), uintptr(len(c.wp)))
		switch e {
		case 0:
			c.wn += int(n)
			c.wp = c.wp[n:]
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // the socket buffer is full: wait in the poller
		default:
			c.werr = e
			return true
		}
	}
	return true
}

// Read reads like net.Conn.Read: io.EOF at the end, the poller's errors
// (deadline, closed) as they are.
func (c *rawConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rp, c.rn, c.rerr = p, 0, 0
	err := c.rc.Read(c.readF)
	for tries := 0; err != nil && tries < 3 && c.early(err, &c.rdWant, &c.rdApplied, c.TCPConn.SetReadDeadline); tries++ {
		err = c.rc.Read(c.readF)
	}
	c.rp = nil
	if err != nil {
		return 0, err
	}
	if c.rerr != 0 {
		return 0, c.opError("read", c.rerr)
	}
	if c.rn == 0 {
		return 0, io.EOF
	}
	return c.rn, nil
}

// Write writes all of p or returns an error, like net.Conn.Write.
func (c *rawConn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.wp, c.wn, c.werr = p, 0, 0
	err := c.rc.Write(c.writeF)
	for tries := 0; err != nil && tries < 3 && c.early(err, &c.wdWant, &c.wdApplied, c.TCPConn.SetWriteDeadline); tries++ {
		err = c.rc.Write(c.writeF) // goes on from what is left in c.wp
	}
	n := c.wn
	c.wp = nil
	if err != nil {
		return n, err
	}
	if c.werr != 0 {
		return n, c.opError("write", c.werr)
	}
	return n, nil
}

// SetDeadline sets both deadlines (see rawConn on when they are applied).
func (c *rawConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the read deadline (see rawConn).
func (c *rawConn) SetReadDeadline(t time.Time) error {
	return c.setDeadline(t, &c.rdWant, &c.rdApplied, c.TCPConn.SetReadDeadline)
}

// SetWriteDeadline sets the write deadline (see rawConn).
func (c *rawConn) SetWriteDeadline(t time.Time) error {
	return c.setDeadline(t, &c.wdWant, &c.wdApplied, c.TCPConn.SetWriteDeadline)
}

func (c *rawConn) setDeadline(t time.Time, want, applied *time.Time, apply func(time.Time) error) error {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	*want = t
	if t.IsZero() || (!applied.IsZero() && !t.Before(*applied)) {
		return nil // later or none: the socket's earlier deadline stands
	}
	if err := apply(t); err != nil {
		return err
	}
	*applied = t
	return nil
}

// early reports whether err is the socket's deadline firing before the
// wanted one; if so it applies the wanted one, and the call is retried.
func (c *rawConn) early(err error, want, applied *time.Time, apply func(time.Time) error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	c.dmu.Lock()
	defer c.dmu.Unlock()
	if !want.IsZero() && !time.Now().Before(*want) {
		return false // the wanted deadline has passed: a real timeout
	}
	if apply(*want) != nil {
		return false
	}
	*applied = *want
	return true
}

func (c *rawConn) opError(op string, e syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, e)}
}

// rawListener hands out rawConns.
type rawListener struct{ net.Listener }

func (l rawListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return wrapConn(c), nil
}
