package edge

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// Body framings of an upstream response.
const (
	bodyNone       = iota
	bodyFixed      // Content-Length
	bodyChunked    // Transfer-Encoding: chunked (SSE from vLLM and SGLang)
	bodyUntilClose // neither: the body ends when the backend closes
)

// relay copies an upstream response body to the client as it arrives. It
// is the response's body stream: fasthttp calls WriteTo when it writes the
// response (one client chunk, flushed, per piece for chunked bodies) and
// CloseWithError afterwards, success or not, which is where the connection
// goes back to the pool and the request's active load is released.
type relay struct {
	c         *call
	u         *upstream
	cc        any
	conn      net.Conn
	client    net.Conn
	br        *bufio.Reader
	mode      int
	remaining int64 // fixed: body bytes left; chunked: bytes left in chunk
	sse       bool
	reusable  bool // the body was read to its end, the connection is clean
	// armed: client write deadlines are in use. Only streamed or large
	// bodies need them; a small body sits in the write buffer and is
	// flushed by the server after WriteTo returns.
	armed bool
	done  bool
	upErr error
}

var errUpstreamBody = errors.New("upstream response body broke off")

func (r *relay) start(u *upstream, cc any, br *bufio.Reader, h *fasthttp.ResponseHeader, head bool, client net.Conn) {
	r.u, r.cc, r.br, r.client = u, cc, br, client
	r.conn = nil
	if pc, ok := cc.(pooledConn); ok {
		r.conn = pc.Conn()
	}
	r.done, r.upErr, r.reusable, r.remaining, r.armed = false, nil, false, 0, false
	r.sse = bytes.HasPrefix(h.ContentType(), []byte("text/event-stream"))
	status := h.StatusCode()
	cl := h.ContentLength()
	switch {
	case head || status < 200 || status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified:
		r.mode = bodyNone
		r.reusable = cl <= 0 || head
	case cl == -1:
		r.mode = bodyChunked
	case cl == -2 || cl < -2:
		r.mode = bodyUntilClose
	case cl == 0:
		r.mode = bodyNone
		r.reusable = true
	default:
		r.mode = bodyFixed
		r.remaining = int64(cl)
	}
	if h.ConnectionClose() {
		r.reusable = false
	}
	r.armed = r.client != nil && (r.mode == bodyChunked || r.mode == bodyUntilClose || r.remaining > 16<<10)
}

// SupportsBodyWriteTo tells fasthttp to call WriteTo, which relays without
// an intermediate copy buffer.
func (r *relay) SupportsBodyWriteTo() bool { return true }

// Read serves callers that do not use WriteTo.
func (r *relay) Read(p []byte) (int, error) {
	var n int
	w := sliceWriter{p: p, n: &n}
	_, err := r.step(&w, len(p))
	if n > 0 {
		return n, nil
	}
	if err == nil {
		err = io.EOF
	}
	return 0, err
}

type sliceWriter struct {
	p []byte
	n *int
}

func (w *sliceWriter) Write(b []byte) (int, error) {
	c := copy(w.p[*w.n:], b)
	*w.n += c
	return c, nil
}

// WriteTo relays the whole body to w.
func (r *relay) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		n, err := r.step(w, 1<<30)
		total += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			if r.upErr != nil && r.sse {
				// Never let a broken stream look like a clean end: SSE
				// clients get an error event, then the connection closes
				// without the terminating chunk.
				r.clientDeadline()
				_, _ = w.Write(sseBrokenEvent)
			}
			return total, err
		}
	}
}

var sseBrokenEvent = []byte("event: error\ndata: {\"error\":{\"message\":\"the inference backend failed mid-stream\",\"type\":\"upstream_error\",\"param\":null,\"code\":\"upstream_stream_broken\"}}\n\n")

// step relays one piece (at most max bytes) of the body to w: what the
// upstream has buffered, or the next read. It returns io.EOF at the end.
func (r *relay) step(w io.Writer, max int) (int, error) {
	switch r.mode {
	case bodyNone:
		return 0, io.EOF
	case bodyFixed:
		if r.remaining == 0 {
			r.reusable = true
			return 0, io.EOF
		}
		return r.piece(w, int(min(r.remaining, int64(max))), false)
	case bodyUntilClose:
		n, err := r.piece(w, max, true)
		if err == io.EOF {
			return n, io.EOF
		}
		return n, err
	}
	// Chunked: a chunk header, its data, its CRLF; size 0 ends the body.
	if r.remaining == 0 {
		size, err := r.chunkSize()
		if err != nil {
			return 0, r.upstreamErr(err)
		}
		if size == 0 {
			if err := r.skipTrailers(); err != nil {
				return 0, r.upstreamErr(err)
			}
			r.reusable = true
			return 0, io.EOF
		}
		r.remaining = size
	}
	n, err := r.piece(w, int(min(r.remaining, int64(max))), false)
	if err == nil && r.remaining == 0 {
		if err := r.expectCRLF(); err != nil {
			return n, r.upstreamErr(err)
		}
	}
	return n, err
}

// piece writes up to n bytes straight out of the upstream read buffer.
func (r *relay) piece(w io.Writer, n int, eofOK bool) (int, error) {
	r.idle()
	if r.br.Buffered() == 0 {
		if _, err := r.br.Peek(1); err != nil {
			if eofOK && err == io.EOF {
				return 0, io.EOF
			}
			return 0, r.upstreamErr(err)
		}
	}
	n = min(n, r.br.Buffered())
	p, _ := r.br.Peek(n)
	r.c.res.ReleasePrefill() // first body byte: the backend has prefilled
	r.clientDeadline()
	wn, err := w.Write(p)
	_, _ = r.br.Discard(wn)
	if r.mode != bodyUntilClose {
		r.remaining -= int64(wn)
	}
	if err != nil {
		return wn, err // the client went away
	}
	return wn, nil
}

// clientDeadline bounds the next write to the client: a client that stops
// reading is cut like a stalled backend.
func (r *relay) clientDeadline() {
	if r.armed {
		_ = r.client.SetWriteDeadline(time.Now().Add(r.c.s.cfg.StreamIdleTimeout))
	}
}

// idle arms the upstream read deadline before a read that may block.
func (r *relay) idle() {
	if r.conn != nil && r.br.Buffered() == 0 {
		_ = r.conn.SetReadDeadline(time.Now().Add(r.c.s.cfg.StreamIdleTimeout))
	}
}

func (r *relay) upstreamErr(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	r.upErr = err
	return errUpstreamBody
}

func (r *relay) line() ([]byte, error) {
	r.idle()
	l, err := r.br.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	return bytes.TrimRight(l, "\r\n"), nil
}

func (r *relay) chunkSize() (int64, error) {
	l, err := r.line()
	if err != nil {
		return 0, err
	}
	if i := bytes.IndexByte(l, ';'); i >= 0 {
		l = l[:i]
	}
	l = bytes.TrimSpace(l)
	if len(l) == 0 || len(l) > 15 {
		return 0, errBadChunk
	}
	var n int64
	for _, c := range l {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, errBadChunk
		}
		n = n<<4 | int64(d)
	}
	return n, nil
}

var errBadChunk = errors.New("malformed chunk header from upstream")

func (r *relay) expectCRLF() error {
	l, err := r.line()
	if err != nil {
		return err
	}
	if len(l) != 0 {
		return errBadChunk
	}
	return nil
}

func (r *relay) skipTrailers() error {
	for {
		l, err := r.line()
		if err != nil {
			return err
		}
		if len(l) == 0 {
			return nil
		}
	}
}

// CloseWithError is called by fasthttp once the response was written (or
// failed to be). It is the single place a relayed call ends.
func (r *relay) CloseWithError(werr error) error {
	r.finish(werr)
	return nil
}

func (r *relay) finish(werr error) {
	if r.done {
		return
	}
	r.done = true
	c, u := r.c, r.u
	if r.upErr != nil {
		u.m.errors[errStream].Inc()
		if !isTimeout(r.upErr) {
			// A backend that dies mid-stream counts toward ejection like a
			// refused connection.
			u.failed(c.s.cfg.FailThreshold, c.s)
		}
	} else if werr != nil {
		c.s.m.disconnects.Inc()
	}
	u.hc.ReleaseReader(r.br)
	if r.reusable && r.upErr == nil && werr == nil {
		u.ops.release(r.cc)
	} else {
		// Closing aborts an unfinished upstream request: the backend stops
		// generating for a client that left.
		u.ops.close(r.cc)
	}
	if r.armed {
		// The client connection lives on for its next request.
		_ = r.client.SetWriteDeadline(time.Time{})
	}
	r.cc, r.br, r.conn, r.client, r.u = nil, nil, nil, nil, nil
	c.res.ReleaseActive()
	c.s.done(c, c.status)
}

func isConnReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
