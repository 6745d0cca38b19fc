package h2grpc

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Stream is one gRPC call: its handler's events in, its messages and
// status out.
type Stream struct {
	c  *conn
	id uint32
	h  Handler

	// The reader's alone.
	in         []byte // a message begun and not yet whole
	received   int64  // bytes the client may still send (the stream's window)
	unacked    int    // bytes received since the last WINDOW_UPDATE
	compressed bool   // grpc-encoding other than identity

	// Guarded by c.mu.
	halfClosed  bool  // the client's side ended
	sendWin     int64 // the client's window for this stream
	pending     []byte
	sent        int // pending[:sent] is written
	headersSent bool
	trailers    bool // the status goes once pending is written
	code        codes.Code
	msg         string
	gone        bool // out of the connection: nothing more is written
	finished    bool // Finish was called: the handler is told nothing more
	released    bool // the handler was released (Releaser)
	resetDue    bool // a Reset is queued: nothing after it
	running     bool // a goroutine is calling the handler
	queue       []event
	ctx         context.Context
	cancel      context.CancelFunc
	due         time.Time // when grpc-timeout resets the stream (zero: never)

	// The running goroutine's.
	own  bool         // the stream is on a goroutine of its own (Go)
	next func() error // what Go was given, to run once the handler returns
}

type eventKind uint8

const (
	evMessage eventKind = iota
	evClose
	evReset
)

type event struct {
	kind eventKind
	b    []byte
}

func (c *conn) newStream(id uint32, halfClosed bool) *Stream {
	s := &Stream{c: c, id: id, received: int64(c.cfg.StreamWindow), halfClosed: halfClosed}
	c.mu.Lock()
	s.sendWin = c.initSend
	c.streams[id] = s
	c.mu.Unlock()
	return s
}

// open makes the stream's handler; false when the stream ended in it.
func (s *Stream) open(m Method) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			s.c.cfg.Logger.Error("h2grpc: a method panicked opening a stream", "panic", r, "stack", string(debug.Stack()))
			s.Finish(status.Error(codes.Internal, "internal error"))
			ok = false
		}
	}()
	if s.h = m(s); s.h == nil {
		s.Finish(status.Error(codes.Unimplemented, "method not served"))
		return false
	}
	return true
}

// Context is cancelled when the stream ends, whichever way.
func (s *Stream) Context() context.Context {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.ctx == nil {
		s.ctx, s.cancel = context.WithCancel(context.Background())
		if s.gone || s.finished {
			s.cancel()
		}
	}
	return s.ctx
}

// Go runs f on a goroutine of the stream's own, for a handler that must
// wait, once the handler's method that calls it has returned; the
// stream's events that come meanwhile wait for f to return and then
// reach the handler there, in order. An error from f ends the stream as
// a handler's does. It may be called only from the handler's methods,
// once in each.
func (s *Stream) Go(f func() error) { s.next = f }

// post gives the handler ev, on this goroutine unless another is calling
// it: ev then waits for that one.
func (s *Stream) post(ev event) {
	c := s.c
	c.mu.Lock()
	if s.finished || s.resetDue {
		c.mu.Unlock()
		return
	}
	if ev.kind == evReset {
		s.resetDue = true
	}
	if s.running {
		if ev.kind == evMessage {
			ev.b = append([]byte(nil), ev.b...) // borrowed from the reader
		}
		s.queue = append(s.queue, ev)
		c.mu.Unlock()
		return
	}
	s.running = true
	c.mu.Unlock()
	if !s.call(ev) {
		s.drain()
	}
}

// drain calls the handler with the events queued until none is left,
// the stream ends or the handler moves to a goroutine of its own.
func (s *Stream) drain() {
	c := s.c
	for {
		c.mu.Lock()
		if len(s.queue) == 0 || s.finished {
			s.queue = nil
			s.running = false
			s.own = false
			if !c.batch {
				c.flushLocked()
			}
			release := s.finished && !s.released
			s.released = s.released || release
			c.mu.Unlock()
			if r, ok := s.h.(Releaser); ok && release {
				r.Release()
			}
			return
		}
		ev := s.queue[0]
		s.queue = s.queue[1:]
		c.mu.Unlock()
		if s.call(ev) {
			return
		}
	}
}

// call gives the handler one event; true when the stream then moved to
// a goroutine of its own (Go), which drains it from then on.
func (s *Stream) call(ev event) bool {
	err := s.safe(func() error {
		switch ev.kind {
		case evMessage:
			return s.h.Message(ev.b)
		case evClose:
			return s.h.CloseSend()
		}
		s.h.Reset()
		return nil
	})
	if ev.kind == evReset {
		s.c.mu.Lock()
		s.finished = true
		s.c.mu.Unlock()
	}
	s.finishOnError(err)
	f := s.next
	s.next = nil
	if f == nil || err != nil || ev.kind == evReset {
		return false
	}
	if s.own {
		s.finishOnError(s.safe(f))
		return false
	}
	s.c.srv.goroutines.Add(1)
	go func() {
		defer s.c.srv.goroutines.Done()
		s.own = true
		s.finishOnError(s.safe(f))
		s.drain()
	}()
	return true
}

// safe runs f; a panic in it is an Internal status, the process goes on.
func (s *Stream) safe(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.c.cfg.Logger.Error("h2grpc: a stream's handler panicked", "panic", r, "stack", string(debug.Stack()))
			err = status.Error(codes.Internal, "internal error")
		}
	}()
	return f()
}

func (s *Stream) finishOnError(err error) {
	if err != nil {
		s.Finish(err)
	}
}

// errGone is what Send returns once the stream has ended.
var errGone = status.Error(codes.Canceled, "h2grpc: the stream has ended")

// Send sends one message, the concatenation of parts: written at once as
// far as the client's windows allow, the rest copied to wait for them.
func (s *Stream) Send(parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > s.c.cfg.MaxMessageBytes {
		return status.Errorf(codes.ResourceExhausted, "h2grpc: a message of %d bytes is over the limit of %d", n, s.c.cfg.MaxMessageBytes)
	}
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.gone || s.finished || s.trailers || c.dead {
		return errGone
	}
	prefix := c.prefix[:]
	prefix[0] = 0
	binary.BigEndian.PutUint32(prefix[1:], uint32(n))
	size := int64(len(prefix) + n)
	if !s.headersSent {
		c.writeHeadersLocked(s.id, false, ":status", "200", "content-type", "application/grpc")
		s.headersSent = true
	}
	if s.sent == len(s.pending) && s.sendWin >= size && c.sendWin >= size {
		// The common case: all of it now, framed around the parts.
		c.writeDataLocked(s.id, prefix, parts)
		s.sendWin -= size
		c.sendWin -= size
	} else {
		if s.pending == nil {
			s.pending = c.bufLocked()
		}
		s.pending = append(s.pending, prefix...)
		for _, p := range parts {
			s.pending = append(s.pending, p...)
		}
		c.pumpLocked(s)
	}
	if !s.running && !c.batch {
		return c.flushLocked()
	}
	return nil
}

// Finish ends the stream with err's status (nil: OK) once what was sent
// is written; the handler is told nothing more. A stream whose client
// has not ended its side is then reset with NO_ERROR, so that the client
// stops sending (RFC 9113 §8.1).
func (s *Stream) Finish(err error) {
	code, msg := statusOf(err)
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.finished {
		return
	}
	s.finished = true
	s.stopLocked()
	if s.gone || s.trailers {
		return
	}
	s.trailers, s.code, s.msg = true, code, msg
	c.pumpLocked(s)
	if !s.running && !c.batch {
		c.flushLocked()
	}
}

// fail ends the stream with err's status for a fault of the client's or
// the transport's, not the handler's, and tells the handler (Reset).
func (s *Stream) fail(err error) {
	code, msg := statusOf(err)
	c := s.c
	c.mu.Lock()
	if s.finished || s.gone || s.trailers {
		c.mu.Unlock()
		return
	}
	s.stopLocked()
	s.trailers, s.code, s.msg = true, code, msg
	c.pumpLocked(s)
	c.mu.Unlock()
	s.post(event{kind: evReset})
}

// stopLocked cancels the stream's context and its deadline.
func (s *Stream) stopLocked() {
	if s.cancel != nil {
		s.cancel()
	}
	s.due = time.Time{}
}

// reset ends the stream without a status (the client reset it, or the
// connection is gone) and tells the handler.
func (s *Stream) reset() {
	c := s.c
	c.mu.Lock()
	c.removeLocked(s)
	s.stopLocked()
	c.mu.Unlock()
	s.post(event{kind: evReset})
}

// deadline resets the stream when d has passed (grpc-timeout). The
// connection has one timer for its streams' deadlines, armed at the
// earliest (expire): a timer of each stream's own cost two allocations
// and an update of the runtime's timer heap on every request.
func (s *Stream) deadline(d time.Duration) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.finished || s.gone {
		return
	}
	s.due = time.Now().Add(d)
	if !c.dueAt.IsZero() && !s.due.Before(c.dueAt) {
		return // the timer fires before
	}
	c.dueAt = s.due
	if c.dueTimer == nil {
		c.dueTimer = time.AfterFunc(d, c.expire)
	} else {
		c.dueTimer.Reset(d)
	}
}

// expire resets the streams whose deadline has passed and arms the
// timer for the earliest of the others.
func (c *conn) expire() {
	c.mu.Lock()
	if c.dead {
		// The connection's end resets its streams.
		c.mu.Unlock()
		return
	}
	now := time.Now()
	var due []*Stream
	c.dueAt = time.Time{}
	for _, s := range c.streams {
		switch {
		case s.due.IsZero() || s.finished:
		case !now.Before(s.due):
			due = append(due, s)
		case c.dueAt.IsZero() || s.due.Before(c.dueAt):
			c.dueAt = s.due
		}
	}
	if !c.dueAt.IsZero() {
		c.dueTimer.Reset(c.dueAt.Sub(now))
	}
	if len(due) == 0 {
		c.mu.Unlock()
		return
	}
	for _, s := range due {
		// Trailers would wait behind data the windows hold: RST_STREAM
		// is the client's news (gRPC's servers send CANCEL).
		c.resetLocked(s, http2.ErrCodeCancel)
	}
	if !c.batch {
		c.flushLocked()
	}
	// The connection's end waits for the handlers to be told.
	c.expiring.Add(1)
	c.mu.Unlock()
	defer c.expiring.Done()
	for _, s := range due {
		s.reset()
	}
}

// answerHTTP answers a request that is not gRPC with an HTTP status.
func (s *Stream) answerHTTP(code string) {
	c := s.c
	c.mu.Lock()
	s.finished = true
	c.writeHeadersLocked(s.id, true, ":status", code)
	s.headersSent = true
	c.endLocked(s)
	c.mu.Unlock()
}

// read takes a DATA frame's payload: whole messages go to the handler,
// a message begun waits in s.in for the rest. It runs on the reader.
func (s *Stream) read(p []byte) error {
	if len(s.in) > 0 {
		if len(s.in) < 5 {
			k := min(5-len(s.in), len(p))
			s.in, p = append(s.in, p[:k]...), p[k:]
			if len(s.in) < 5 {
				return nil
			}
		}
		l, err := s.messageLength(s.in)
		if err != nil {
			return err
		}
		if cap(s.in) < 5+l {
			grown := s.c.assembly(5 + l)
			s.c.recycle(s.in)
			s.in = append(grown, s.in...)
		}
		k := min(5+l-len(s.in), len(p))
		s.in, p = append(s.in, p[:k]...), p[k:]
		if len(s.in) < 5+l {
			return nil
		}
		s.post(event{kind: evMessage, b: s.in[5:]})
		// The handler had it on loan: the buffer serves the next message
		// of any stream.
		s.c.recycle(s.in)
		s.in = nil
	}
	for len(p) >= 5 {
		l, err := s.messageLength(p)
		if err != nil {
			return err
		}
		if len(p) < 5+l {
			break
		}
		s.post(event{kind: evMessage, b: p[5 : 5+l]})
		p = p[5+l:]
	}
	if len(p) > 0 {
		n := len(p)
		if len(p) >= 5 {
			l, _ := s.messageLength(p) // checked above
			n = 5 + l
		}
		s.in = append(s.c.assembly(n), p...)
	}
	return nil
}

// assembly is a buffer for a message of n bytes read across frames:
// one a message before left, or a new one. It is the reader's alone.
func (c *conn) assembly(n int) []byte {
	for i := len(c.inFree) - 1; i >= 0; i-- {
		if b := c.inFree[i]; cap(b) >= n {
			c.inFree[i] = c.inFree[len(c.inFree)-1]
			c.inFree = c.inFree[:len(c.inFree)-1]
			return b[:0]
		}
	}
	return make([]byte, 0, max(n, 512))
}

// recycle keeps an assembly buffer for the next message, within bounds:
// a fresh buffer for every large message was page faults and zeroing.
func (c *conn) recycle(b []byte) {
	if cap(b) == 0 || cap(b) > 4<<20 {
		return
	}
	if len(c.inFree) < 8 {
		c.inFree = append(c.inFree, b)
		return
	}
	// Full: keep the larger.
	for i, f := range c.inFree {
		if cap(f) < cap(b) {
			c.inFree[i] = b
			return
		}
	}
}

// messageLength reads a message's 5-byte prefix.
func (s *Stream) messageLength(p []byte) (int, error) {
	switch p[0] {
	case 0:
	case 1:
		if s.compressed {
			return 0, status.Error(codes.Unimplemented, "h2grpc: compressed messages are not served")
		}
		return 0, status.Error(codes.Internal, "h2grpc: a compressed message without grpc-encoding")
	default:
		return 0, status.Errorf(codes.Internal, "h2grpc: message flags %#x", p[0])
	}
	l := binary.BigEndian.Uint32(p[1:5])
	if uint64(l) > uint64(s.c.cfg.MaxMessageBytes) {
		return 0, status.Errorf(codes.ResourceExhausted, "h2grpc: a message of %d bytes is over the limit of %d", l, s.c.cfg.MaxMessageBytes)
	}
	return int(l), nil
}

// writeDataLocked writes head then parts as DATA frames of stream id no
// larger than the client takes, without copying them anywhere but into
// the connection's buffer.
func (c *conn) writeDataLocked(id uint32, head []byte, parts [][]byte) {
	left := len(head)
	for _, p := range parts {
		left += len(p)
	}
	cur := head
	next := 0
	for left > 0 {
		n := min(left, c.maxFrame)
		c.writeDataHeaderLocked(id, n)
		left -= n
		for n > 0 {
			for len(cur) == 0 {
				cur, next = parts[next], next+1
			}
			k := min(n, len(cur))
			c.bw.Write(cur[:k])
			cur, n = cur[k:], n-k
		}
	}
}

// pumpLocked writes what s has waiting as far as the windows allow, then
// its status once nothing waits.
func (c *conn) pumpLocked(s *Stream) {
	if s.gone {
		return
	}
	for s.sent < len(s.pending) && s.sendWin > 0 && c.sendWin > 0 {
		n := min(len(s.pending)-s.sent, c.maxFrame, int(s.sendWin), int(c.sendWin))
		c.writeDataLocked(s.id, s.pending[s.sent:s.sent+n], nil)
		s.sent += n
		s.sendWin -= int64(n)
		c.sendWin -= int64(n)
	}
	if s.sent < len(s.pending) {
		return
	}
	if s.pending != nil {
		c.keepLocked(s.pending)
		s.pending, s.sent = nil, 0
	}
	if !s.trailers {
		return
	}
	kv := c.trailer[:0]
	if !s.headersSent {
		// Trailers-only: the status is the whole answer.
		kv = append(kv, ":status", "200", "content-type", "application/grpc")
		s.headersSent = true
	}
	kv = append(kv, "grpc-status", strconv.Itoa(int(s.code)))
	if s.msg != "" {
		kv = append(kv, "grpc-message", encodeGrpcMessage(s.msg))
	}
	c.writeHeadersLocked(s.id, true, kv...)
	c.endLocked(s)
}

// endLocked ends a stream whose answer is written: a client still
// sending is told to stop, and the stream leaves the connection.
func (c *conn) endLocked(s *Stream) {
	if !s.halfClosed {
		c.fr.WriteRSTStream(s.id, http2.ErrCodeNo)
	}
	c.removeLocked(s)
}

// resetLocked resets s with code and takes it out of the connection.
func (c *conn) resetLocked(s *Stream, code http2.ErrCode) {
	if !s.gone {
		c.fr.WriteRSTStream(s.id, code)
		c.removeLocked(s)
	}
}

func (c *conn) removeLocked(s *Stream) {
	if s.gone {
		return
	}
	s.gone = true
	delete(c.streams, s.id)
	if s.pending != nil {
		c.keepLocked(s.pending)
		s.pending, s.sent = nil, 0
	}
	c.closeIfDoneLocked()
}

// encodeGrpcMessage percent-encodes a status message as gRPC's
// grpc-message has it: bytes outside printable ASCII, and '%'.
func encodeGrpcMessage(m string) string {
	clean := true
	for i := 0; i < len(m); i++ {
		if b := m[i]; b < ' ' || b > '~' || b == '%' {
			clean = false
			break
		}
	}
	if clean {
		return m
	}
	out := make([]byte, 0, len(m)+8)
	for i := 0; i < len(m); i++ {
		if b := m[i]; b < ' ' || b > '~' || b == '%' {
			out = fmt.Appendf(out, "%%%02X", b)
		} else {
			out = append(out, b)
		}
	}
	return string(out)
}
