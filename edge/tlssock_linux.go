//go:build linux

package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// tlsSock is TLS over a loop's non-blocking socket, so TLS connections
// are served by the same loops, parser and rules as plain ones.
//
// crypto/tls does the protocol; tlsWire is its transport. After the
// handshake (done by a goroutine with blocking I/O through the runtime's
// poller, since a handshake cannot be resumed), reads go to the socket
// directly and report "would block" as a temporary net.Error, which
// crypto/tls does not make sticky: the record it was reading resumes on
// the next read. Writes are taken whole into a buffer that the loop puts
// on the wire, so tls.Conn never sees a short write.
type tlsSock struct {
	conn *tls.Conn
	w    *tlsWire
}

// tlsWire is the net.Conn a tls.Conn runs over.
type tlsWire struct {
	nc         net.Conn // during the handshake; nil after
	fd         int
	out        []byte // ciphertext not yet written
	off        int
	local, rem net.Addr
}

// errWouldBlock is a temporary net.Error: crypto/tls returns it without
// breaking the connection.
var errWouldBlock = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "would block" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

func (w *tlsWire) Read(p []byte) (int, error) {
	if w.nc != nil {
		return w.nc.Read(p)
	}
	n, e := rawRead(w.fd, p)
	switch {
	case e == syscall.EAGAIN:
		return 0, errWouldBlock
	case e != 0:
		return 0, e
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (w *tlsWire) Write(p []byte) (int, error) {
	if w.nc != nil {
		return w.nc.Write(p)
	}
	w.out = append(w.out, p...)
	return len(p), nil
}

func (w *tlsWire) Close() error                       { return nil } // the loop closes the socket
func (w *tlsWire) LocalAddr() net.Addr                { return w.local }
func (w *tlsWire) RemoteAddr() net.Addr               { return w.rem }
func (w *tlsWire) SetDeadline(t time.Time) error      { return w.deadline(t, 0) }
func (w *tlsWire) SetReadDeadline(t time.Time) error  { return w.deadline(t, 1) }
func (w *tlsWire) SetWriteDeadline(t time.Time) error { return w.deadline(t, 2) }

func (w *tlsWire) deadline(t time.Time, which int) error {
	if w.nc == nil {
		return nil // the loop keeps its own deadlines
	}
	switch which {
	case 1:
		return w.nc.SetReadDeadline(t)
	case 2:
		return w.nc.SetWriteDeadline(t)
	}
	return w.nc.SetDeadline(t)
}

// flush writes buffered ciphertext: 0 when all of it is out or the
// socket is full (EAGAIN is swallowed: pending says so).
func (w *tlsWire) flush() syscall.Errno {
	for w.off < len(w.out) {
		n, e := rawWrite(w.fd, w.out[w.off:])
		if e == syscall.EAGAIN {
			return 0
		}
		if e != 0 {
			return e
		}
		w.off += n
	}
	w.out, w.off = w.out[:0], 0
	return 0
}

func (t *tlsSock) pending() bool { return t.w.off < len(t.w.out) }

func (t *tlsSock) read(s *sock, p []byte) (int, syscall.Errno) {
	n, err := t.conn.Read(p)
	if n > 0 {
		return n, 0
	}
	var errno syscall.Errno
	switch {
	case err == nil:
		return 0, syscall.EAGAIN
	case errors.Is(err, errWouldBlock):
		s.rd = false
		return 0, syscall.EAGAIN
	case err == io.EOF:
		return 0, 0
	case errors.As(err, &errno):
		return 0, errno
	}
	return 0, syscall.ECONNRESET // a TLS protocol error
}

func (t *tlsSock) writev(s *sock, a, b []byte) (int, syscall.Errno) {
	for _, p := range [2][]byte{a, b} {
		if len(p) > 0 {
			if _, err := t.conn.Write(p); err != nil {
				return 0, syscall.EPIPE
			}
		}
	}
	if e := t.w.flush(); e != 0 {
		return 0, e
	}
	return len(a) + len(b), 0
}

// closeNotify queues TLS's close_notify and makes one attempt to send it.
func (t *tlsSock) closeNotify() {
	_ = t.conn.CloseWrite()
	_ = t.w.flush()
}

// handshakeClient runs a client connection's TLS handshake on a
// duplicate of fd served by the runtime's poller, then gives the
// connection (fd itself) to the loop with the fewest connections.
func (l *evLoop) handshakeClient(nc newConn) {
	s := l.s
	w := &tlsWire{fd: nc.fd}
	dup, err := syscall.Dup(nc.fd)
	if err == nil {
		var conn net.Conn
		f := os.NewFile(uintptr(dup), "client")
		conn, err = net.FileConn(f)
		f.Close()
		if err == nil {
			w.nc, w.local, w.rem = conn, conn.LocalAddr(), conn.RemoteAddr()
			tc := tls.Server(w, serverTLS(s.tlsPub))
			ctx, cancel := context.WithTimeout(s.bg, s.cfg.HeaderTimeout)
			err = tc.HandshakeContext(ctx)
			cancel()
			conn.Close()
			w.nc = nil
			if err == nil {
				nc.tls = &tlsSock{conn: tc, w: w}
			}
		}
	}
	if err != nil {
		s.log.Debug("tls handshake failed", "client", string(nc.ip), "err", err)
		s.m.tlsHandshakeErrors.Inc()
		syscall.Close(nc.fd)
		s.clientConns.Add(-1)
		return
	}
	if t := l.least(); t.give(nc) {
		return
	}
	syscall.Close(nc.fd)
	s.clientConns.Add(-1)
}

// dialTLS connects to an https backend and runs the TLS handshake, in a
// goroutine; the result goes back to up's loop.
func (up *upConn) dialTLS() {
	u, l := up.u, up.l
	go func() {
		fd, ts, err := dialTLSBackend(l.s.bg, u)
		l.post(func() { up.dialed(fd, ts, err) })
	}()
}

func dialTLSBackend(ctx context.Context, u *upstream) (int, *tlsSock, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout+5*time.Second)
	defer cancel()
	d := net.Dialer{Timeout: dialTimeout}
	conn, err := d.DialContext(ctx, "tcp", u.addr.host)
	if err != nil {
		return -1, nil, err
	}
	defer conn.Close()
	tcp := conn.(*net.TCPConn)
	_ = tcp.SetNoDelay(true)
	w := &tlsWire{nc: conn, local: conn.LocalAddr(), rem: conn.RemoteAddr()}
	tc := tls.Client(w, u.tls)
	if err := tc.HandshakeContext(ctx); err != nil {
		return -1, nil, err
	}
	rc, err := tcp.SyscallConn()
	if err != nil {
		return -1, nil, err
	}
	fd := -1
	if cerr := rc.Control(func(f uintptr) { fd, err = syscall.Dup(int(f)) }); cerr != nil {
		return -1, nil, cerr
	}
	if err != nil {
		return -1, nil, err
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return -1, nil, err
	}
	w.nc, w.fd = nil, fd
	return fd, &tlsSock{conn: tc, w: w}, nil
}

// dialed continues a connection to an https backend once its handshake
// is done (or failed).
func (up *upConn) dialed(fd int, ts *tlsSock, err error) {
	if up.state == upClosed {
		// The client left meanwhile; close() has already counted the
		// connection out.
		if fd >= 0 {
			syscall.Close(fd)
		}
		return
	}
	if err != nil {
		up.failBefore(err)
		return
	}
	up.sock.fd, up.sock.tls = fd, ts
	if e := up.l.add(fd, up); e != nil {
		syscall.Close(fd)
		up.sock.fd = -1
		up.failBefore(e)
		return
	}
	up.state = upSending
	up.dl = up.l.now + int64(up.l.s.cfg.UpstreamHeaderTimeout)
	if e := up.writeReq(); e != 0 {
		up.failBefore(e)
		return
	}
	if up.state == upHead {
		up.sock.rd = true
		up.readHead()
	}
}
