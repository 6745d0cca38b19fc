package edge

import (
	"io"
	"net"
	"os"
	"syscall"
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
// Reads and writes may run concurrently (each has its own state); two
// concurrent reads (or writes) are serialised by the poller's fd locks.
type rawConn struct {
	*net.TCPConn
	rc syscall.RawConn

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
