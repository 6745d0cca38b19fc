package h2grpc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// conn is one HTTP/2 connection. Its goroutine (serve) reads every frame
// and runs the handlers of streams that are not on a goroutine of their
// own. mu guards the streams, the send side and every write: a stream on
// its own goroutine sends as the reader does.
type conn struct {
	srv *Server
	cfg *Config
	nc  net.Conn
	br  *bufio.Reader
	fr  *http2.Framer // reads; writes of frames other than DATA

	mu       sync.Mutex
	bw       *bufio.Writer
	henc     *hpack.Encoder
	hbuf     bytes.Buffer
	streams  map[uint32]*Stream
	sendWin  int64    // the client's window for the connection
	initSend int64    // the client's initial stream window
	maxFrame int      // the largest DATA payload the client takes
	batch    bool     // the reader is handling frames and flushes after them
	away     bool     // GOAWAY sent: no new stream
	dead     bool     // a write failed or the connection closed
	free     [][]byte // buffers data waited in (bufLocked)
	hdr      [9]byte  // a DATA frame's header being written
	prefix   [5]byte  // a message's prefix being written
	trailer  [8]string
	expiring sync.WaitGroup // deadlines resetting streams, added to under mu while !dead
	dueTimer *time.Timer    // the streams' deadlines (expire)
	dueAt    time.Time      // when dueTimer fires (zero: it is not armed)

	// Reader only.
	hblk     *headerBlock
	inFree   [][]byte // assembly buffers for messages across frames
	lastID   uint32   // the highest stream id the client opened
	unacked  int      // bytes received since the last connection WINDOW_UPDATE
	received int64    // bytes the client may still send on the connection
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{srv: s, cfg: &s.cfg, nc: nc, streams: map[uint32]*Stream{},
		sendWin: initialWindow, initSend: initialWindow, maxFrame: 16384, received: int64(s.cfg.ConnWindow)}
	c.br = bufio.NewReaderSize(nc, 64<<10)
	c.bw = bufio.NewWriterSize(nc, 64<<10)
	c.fr = http2.NewFramer(c.bw, c.br)
	c.hblk = newHeaderBlock(uint32(s.cfg.MaxHeaderListBytes))
	c.fr.SetMaxReadFrameSize(maxReadFrame)
	c.fr.SetReuseFrames() // a frame is handled before the next is read
	c.henc = hpack.NewEncoder(&c.hbuf)
	return c
}

// maxReadFrame is the SETTINGS_MAX_FRAME_SIZE offered: large DATA frames
// are fewer headers to read and fewer handler calls per message.
const maxReadFrame = 1 << 20

func (c *conn) serve() {
	defer c.srv.goroutines.Done()
	defer c.srv.closed(c)
	defer c.nc.Close()
	err := c.run()
	c.mu.Lock()
	c.dead = true
	if ce, ok := err.(http2.ConnectionError); ok {
		// Tell the client why before hanging up.
		c.fr.WriteGoAway(c.lastID, http2.ErrCode(ce), nil)
		c.bw.Flush()
	}
	if c.dueTimer != nil {
		c.dueTimer.Stop()
	}
	streams := make([]*Stream, 0, len(c.streams))
	for _, st := range c.streams {
		streams = append(streams, st)
	}
	c.mu.Unlock()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, syscall.ECONNRESET) {
		c.cfg.Logger.Debug("h2grpc: connection ended", "err", err)
	}
	for _, st := range streams {
		st.reset()
	}
	// Streams whose deadline passed left c.streams before dead was set:
	// their handlers are told on the timer's goroutine, and Stop returns
	// only once every handler was.
	c.expiring.Wait()
}

func (c *conn) run() error {
	c.nc.SetReadDeadline(time.Now().Add(c.cfg.PrefaceTimeout))
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, preface[:]); err != nil {
		return err
	}
	if string(preface[:]) != http2.ClientPreface {
		return errors.New("h2grpc: not an HTTP/2 client preface")
	}
	c.nc.SetReadDeadline(time.Time{})
	c.mu.Lock()
	c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: uint32(c.cfg.MaxConcurrentStreams)},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(c.cfg.StreamWindow)},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: maxReadFrame},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: uint32(c.cfg.MaxHeaderListBytes)},
	)
	if d := c.cfg.ConnWindow - initialWindow; d > 0 {
		c.fr.WriteWindowUpdate(0, uint32(d))
	}
	err := c.bw.Flush()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	first := true
	inBatch := false // c.batch as the reader last set it: only it sets it
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				// The stream's fault, not the connection's.
				c.refuse(se.StreamID, se.Code)
				continue
			}
			return err
		}
		if first {
			// The preface's SETTINGS come first (RFC 9113 §3.4).
			if _, ok := f.(*http2.SettingsFrame); !ok {
				return http2.ConnectionError(http2.ErrCodeProtocol)
			}
			first = false
		}
		if !inBatch {
			c.mu.Lock()
			c.batch = true
			c.mu.Unlock()
			inBatch = true
		}
		if err := c.frame(f); err != nil {
			return err
		}
		if c.br.Buffered() == 0 {
			inBatch = false
			c.mu.Lock()
			c.batch = false
			err := c.flushLocked()
			c.mu.Unlock()
			if err != nil {
				return err
			}
		}
	}
}

// flushLocked writes out what is buffered; a failed write closes the
// connection, whose reader then resets the streams.
func (c *conn) flushLocked() error {
	if c.dead || c.bw.Buffered() == 0 {
		return nil
	}
	if err := c.bw.Flush(); err != nil {
		c.dead = true
		c.nc.Close()
		return err
	}
	return nil
}

func (c *conn) frame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		return c.settings(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			c.mu.Lock()
			c.fr.WritePing(true, f.Data)
			c.mu.Unlock()
		}
	case *http2.WindowUpdateFrame:
		return c.windowUpdate(f)
	case *http2.RSTStreamFrame:
		if f.StreamID > c.lastID {
			return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
		}
		if st, _ := c.stream(f.StreamID); st != nil {
			st.reset()
		}
	case *http2.GoAwayFrame:
		// The client opens no more streams; those open go on.
	case *http2.HeadersFrame:
		c.hblk.begin(f)
		if err := c.hblk.write(f.HeaderBlockFragment(), false); err != nil {
			return err
		}
		if f.HeadersEnded() {
			return c.endHeaders()
		}
	case *http2.ContinuationFrame:
		// The framer keeps a block's frames together (RFC 9113 §6.10).
		if err := c.hblk.write(f.HeaderBlockFragment(), true); err != nil {
			return err
		}
		if f.HeadersEnded() {
			return c.endHeaders()
		}
	case *http2.DataFrame:
		return c.data(f)
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // a client never pushes
	}
	// PRIORITY and frames of unknown types are ignored (RFC 9113 §5.5).
	return nil
}

func (c *conn) settings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			d := int64(s.Val) - c.initSend
			c.initSend = int64(s.Val)
			for _, st := range c.streams {
				if st.sendWin += d; st.sendWin > maxWindow {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
		case http2.SettingMaxFrameSize:
			c.maxFrame = int(s.Val)
		case http2.SettingHeaderTableSize:
			c.henc.SetMaxDynamicTableSizeLimit(s.Val)
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.fr.WriteSettingsAck()
	// A larger window may let waiting data go.
	for _, st := range c.streams {
		c.pumpLocked(st)
	}
	return nil
}

func (c *conn) windowUpdate(f *http2.WindowUpdateFrame) error {
	if f.StreamID > c.lastID {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.mu.Lock()
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		defer c.mu.Unlock()
		if c.sendWin += inc; c.sendWin > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		for _, st := range c.streams {
			c.pumpLocked(st)
		}
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		c.mu.Unlock()
		return nil // a closed stream: updates may cross its end
	}
	if st.sendWin += inc; st.sendWin > maxWindow {
		// A stream error (RFC 9113 §6.9.1): that stream is reset, the
		// connection goes on.
		c.mu.Unlock()
		c.refuse(f.StreamID, http2.ErrCodeFlowControl)
		return nil
	}
	c.pumpLocked(st)
	c.mu.Unlock()
	return nil
}

// stream is stream id if it is open, and whether the client's side of it
// ended.
func (c *conn) stream(id uint32) (st *Stream, halfClosed bool) {
	c.mu.Lock()
	if st = c.streams[id]; st != nil {
		halfClosed = st.halfClosed
	}
	c.mu.Unlock()
	return st, halfClosed
}

// halfClose ends the client's side of st.
func (c *conn) halfClose(st *Stream) {
	c.mu.Lock()
	st.halfClosed = true
	c.mu.Unlock()
}

// refuse resets stream id with code, the stream's handler told.
func (c *conn) refuse(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	st := c.streams[id]
	if st == nil {
		c.fr.WriteRSTStream(id, code)
		c.mu.Unlock()
		return
	}
	c.resetLocked(st, code)
	c.mu.Unlock()
	st.reset()
}

// endHeaders handles a whole header block.
func (c *conn) endHeaders() error {
	streamErr, connErr := c.hblk.end()
	if connErr != nil {
		return connErr
	}
	if streamErr != nil {
		c.cfg.Logger.Debug("h2grpc: malformed header block", "stream", c.hblk.id, "err", streamErr)
		c.refuse(c.hblk.id, http2.ErrCodeProtocol)
		return nil
	}
	return c.headers(c.hblk)
}

func (c *conn) headers(f *headerBlock) error {
	id := f.id
	if id <= c.lastID {
		st, halfClosed := c.stream(id)
		if st == nil {
			// A stream closed, ended or never opened below one that was
			// (RFC 9113 §5.1.1): trailers crossing its end, or a client
			// out of order; either way not a stream to serve.
			c.refuse(id, http2.ErrCodeStreamClosed)
			return nil
		}
		if !f.endStream || halfClosed {
			c.refuse(id, http2.ErrCodeProtocol)
			return nil
		}
		// Trailers end the client's side; gRPC gives them no meaning.
		c.halfClose(st)
		st.post(event{kind: evClose})
		return nil
	}
	if id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol) // client streams are odd
	}
	c.lastID = id
	c.mu.Lock()
	if c.away || len(c.streams) >= c.cfg.MaxConcurrentStreams {
		c.fr.WriteRSTStream(id, http2.ErrCodeRefusedStream)
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	st := c.newStream(id, f.endStream)
	if f.truncated {
		// Over SETTINGS_MAX_HEADER_LIST_SIZE: the framer dropped fields.
		st.answerHTTP("431")
		return nil
	}
	if f.pseudo("method") != "POST" {
		st.answerHTTP("405")
		return nil
	}
	var ctype, encoding, timeout string
	for _, h := range f.fields {
		switch h.Name {
		case "content-type":
			ctype = h.Value
		case "grpc-encoding":
			encoding = h.Value
		case "grpc-timeout":
			timeout = h.Value
		}
	}
	if ctype != "application/grpc" && !strings.HasPrefix(ctype, "application/grpc+") && !strings.HasPrefix(ctype, "application/grpc;") {
		st.answerHTTP("415")
		return nil
	}
	st.compressed = encoding != "" && encoding != "identity"
	m := c.srv.methods[f.pseudo("path")]
	if m == nil {
		st.Finish(status.Error(codes.Unimplemented, "h2grpc: unknown method "+f.pseudo("path")))
		return nil
	}
	d, ok := parseTimeout(timeout)
	if !ok {
		st.Finish(status.Error(codes.Internal, "h2grpc: malformed grpc-timeout "+strconv.Quote(timeout)))
		return nil
	}
	if !st.open(m) {
		return nil
	}
	if d >= 0 {
		// Once the handler exists: the deadline resets it.
		st.deadline(d)
	}
	if f.endStream {
		st.post(event{kind: evClose})
	}
	return nil
}

// parseTimeout reads gRPC's grpc-timeout, at most 8 digits and a unit;
// -1 when there is none.
func parseTimeout(v string) (time.Duration, bool) {
	if v == "" {
		return -1, true
	}
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	if n > int64(1<<63-1)/int64(unit) {
		return 1<<63 - 1, true
	}
	return time.Duration(n) * unit, true
}

func (c *conn) data(f *http2.DataFrame) error {
	id := f.StreamID
	n := int(f.Length) // padding included: it counts against the windows
	if c.received -= int64(n); c.received < 0 {
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	if c.unacked += n; c.unacked >= c.cfg.ConnWindow/4 {
		c.mu.Lock()
		c.fr.WriteWindowUpdate(0, uint32(c.unacked))
		c.mu.Unlock()
		c.received += int64(c.unacked)
		c.unacked = 0
	}
	if id > c.lastID {
		return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
	}
	st, halfClosed := c.stream(id)
	if st == nil || halfClosed {
		if st != nil {
			c.refuse(id, http2.ErrCodeStreamClosed)
		}
		// A stream that ended: data in flight as it ended is dropped.
		return nil
	}
	if st.received -= int64(n); st.received < 0 {
		c.refuse(id, http2.ErrCodeFlowControl)
		return nil
	}
	if err := st.read(f.Data()); err != nil {
		st.fail(err)
		return nil
	}
	if f.StreamEnded() {
		c.halfClose(st)
		if len(st.in) > 0 {
			st.fail(status.Error(codes.Internal, "h2grpc: the client's side ended inside a message"))
			return nil
		}
		st.post(event{kind: evClose})
		return nil
	}
	if st.unacked += n; st.unacked >= c.cfg.StreamWindow/4 {
		c.mu.Lock()
		if c.streams[id] == st {
			c.fr.WriteWindowUpdate(id, uint32(st.unacked))
		}
		c.mu.Unlock()
		st.received += int64(st.unacked)
		st.unacked = 0
	}
	return nil
}

// goAway tells the client no new stream will be served; the connection
// closes once the streams open have ended.
func (c *conn) goAway() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.away {
		return
	}
	c.away = true
	// lastID is the reader's; a stream it opens after this GOAWAY is
	// refused, and the client retries it elsewhere (RFC 9113 §6.8).
	c.fr.WriteGoAway(1<<31-1, http2.ErrCodeNo, nil)
	c.flushLocked()
	c.closeIfDoneLocked()
}

// closeIfDoneLocked closes a connection going away once no stream is
// open.
func (c *conn) closeIfDoneLocked() {
	if c.away && len(c.streams) == 0 {
		c.flushLocked()
		c.dead = true
		c.nc.Close()
	}
}

// bufLocked is a buffer for data waiting for the client's windows: one
// that waited before, or nil.
func (c *conn) bufLocked() []byte {
	if n := len(c.free); n > 0 {
		b := c.free[n-1]
		c.free = c.free[:n-1]
		return b[:0]
	}
	return nil
}

// keepLocked keeps b, written out, for data to wait in again.
func (c *conn) keepLocked(b []byte) {
	if cap(b) > 0 && cap(b) <= 1<<20 && len(c.free) < 16 {
		c.free = append(c.free, b)
	}
}

// writeDataHeaderLocked writes the header of a DATA frame of n bytes
// (a stream ends with its trailers, never with DATA). Its bytes are the
// connection's: a local array would escape through the writer to the
// heap on every frame.
func (c *conn) writeDataHeaderLocked(id uint32, n int) {
	h := &c.hdr
	h[0], h[1], h[2] = byte(n>>16), byte(n>>8), byte(n)
	h[3] = byte(http2.FrameData)
	h[4] = 0
	binary.BigEndian.PutUint32(h[5:], id)
	c.bw.Write(h[:])
}

// writeHeadersLocked writes a header block of kv (name, value, …).
func (c *conn) writeHeadersLocked(id uint32, end bool, kv ...string) {
	c.hbuf.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		c.henc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	block := c.hbuf.Bytes()
	first := min(len(block), c.maxFrame)
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block[:first], EndStream: end, EndHeaders: first == len(block)})
	for block = block[first:]; len(block) > 0; {
		n := min(len(block), c.maxFrame)
		c.fr.WriteContinuation(id, n == len(block), block[:n])
		block = block[n:]
	}
}
