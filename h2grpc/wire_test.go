package h2grpc_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/kvca/kvca/h2grpc"
)

// peer is a raw HTTP/2 client on one connection: the frames the server
// writes, read as they come.
type peer struct {
	t    *testing.T
	nc   net.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
}

// dial connects to f's server; settings are the client's SETTINGS (the
// preface's), nil: none.
func dial(t *testing.T, f *fixture, settings ...http2.Setting) *peer {
	t.Helper()
	nc, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	p := &peer{t: t, nc: nc, fr: http2.NewFramer(nc, nc)}
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.enc = hpack.NewEncoder(&p.hbuf)
	io.WriteString(nc, http2.ClientPreface)
	p.fr.WriteSettings(settings...)
	return p
}

func (p *peer) headers(id uint32, end bool, kv ...string) {
	p.t.Helper()
	p.hbuf.Reset()
	for i := 0; i < len(kv); i += 2 {
		p.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.hbuf.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		p.t.Fatal(err)
	}
}

// call opens stream id on method with gRPC's headers.
func (p *peer) call(id uint32, method string, extra ...string) {
	p.t.Helper()
	p.headers(id, false, append([]string{":method", "POST", ":scheme", "http", ":path", method, ":authority", "x",
		"content-type", "application/grpc", "te", "trailers"}, extra...)...)
}

// message sends a gRPC message with flags on stream id.
func (p *peer) message(id uint32, flags byte, b []byte, end bool) {
	p.t.Helper()
	m := append([]byte{flags, 0, 0, 0, 0}, b...)
	binary.BigEndian.PutUint32(m[1:], uint32(len(b)))
	if err := p.fr.WriteData(id, end, m); err != nil {
		p.t.Fatal(err)
	}
}

// next is the next frame the server writes, SETTINGS, their acks,
// WINDOW_UPDATEs and PING acks skipped unless want says otherwise.
func (p *peer) next(keep func(http2.Frame) bool) http2.Frame {
	p.t.Helper()
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			p.t.Fatalf("reading: %v", err)
		}
		if keep != nil && keep(f) {
			return f
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				p.fr.WriteSettingsAck()
			}
			continue
		case *http2.WindowUpdateFrame, *http2.PingFrame:
			continue
		}
		return f
	}
}

// goAway waits for the server's GOAWAY and returns its code.
func (p *peer) goAway() http2.ErrCode {
	p.t.Helper()
	for {
		f := p.next(nil)
		if g, ok := f.(*http2.GoAwayFrame); ok {
			return g.ErrCode
		}
	}
}

// fields are a header frame's fields by name.
func fields(t *testing.T, f http2.Frame) map[string]string {
	t.Helper()
	mh, ok := f.(*http2.MetaHeadersFrame)
	if !ok {
		t.Fatalf("%v, want HEADERS", f)
	}
	out := map[string]string{}
	for _, h := range mh.Fields {
		out[h.Name] = h.Value
	}
	return out
}

// Frames HTTP/2 calls connection errors end the connection with GOAWAY
// and the code RFC 9113 gives them.
func TestConnectionErrors(t *testing.T) {
	f := start(t, h2grpc.Config{}, nil)
	for name, c := range map[string]struct {
		send func(p *peer)
		want http2.ErrCode
	}{
		"even stream id":           {func(p *peer) { p.call(2, "/t.T/Echo") }, http2.ErrCodeProtocol},
		"data on an idle stream":   {func(p *peer) { p.message(5, 0, []byte("x"), false) }, http2.ErrCodeProtocol},
		"reset of an idle stream":  {func(p *peer) { p.fr.WriteRSTStream(9, http2.ErrCodeCancel) }, http2.ErrCodeProtocol},
		"connection window beyond": {func(p *peer) { p.fr.WriteWindowUpdate(0, 1<<31-1) }, http2.ErrCodeFlowControl},
		"push from a client": {func(p *peer) {
			p.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, EndHeaders: true})
		}, http2.ErrCodeProtocol},
		"continuation alone": {func(p *peer) { p.fr.WriteContinuation(1, true, nil) }, http2.ErrCodeProtocol},
	} {
		t.Run(name, func(t *testing.T) {
			p := dial(t, f)
			c.send(p)
			if got := p.goAway(); got != c.want {
				t.Fatalf("GOAWAY %v, want %v", got, c.want)
			}
		})
	}
}

// A connection whose first frame is not SETTINGS, or whose preface is
// not HTTP/2's, is refused.
func TestPreface(t *testing.T) {
	f := start(t, h2grpc.Config{}, nil)
	nc, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(nc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, err := io.ReadAll(nc); err != nil {
		t.Fatalf("an HTTP/1.1 request: %v, want the connection closed", err)
	}

	nc2, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	nc2.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(nc2, http2.ClientPreface)
	fr := http2.NewFramer(nc2, nc2)
	fr.WritePing(false, [8]byte{1})
	for {
		fm, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no GOAWAY for a PING before SETTINGS: %v", err)
		}
		if g, ok := fm.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeProtocol {
				t.Fatalf("GOAWAY %v", g.ErrCode)
			}
			break
		}
	}
}

// Requests that are not gRPC get HTTP's answer; an unknown method, a
// compressed message or a malformed grpc-timeout get gRPC's status, the
// connection going on.
func TestStreamAnswers(t *testing.T) {
	f := start(t, h2grpc.Config{}, nil)
	p := dial(t, f)
	p.headers(1, true, ":method", "GET", ":scheme", "http", ":path", "/t.T/Echo", ":authority", "x")
	if h := fields(t, p.next(nil)); h[":status"] != "405" {
		t.Fatalf("GET: %v", h)
	}
	p.headers(3, false, ":method", "POST", ":scheme", "http", ":path", "/t.T/Echo", ":authority", "x", "content-type", "text/plain")
	if h := fields(t, p.next(nil)); h[":status"] != "415" {
		t.Fatalf("text/plain: %v", h)
	}
	if _, ok := p.next(nil).(*http2.RSTStreamFrame); !ok {
		t.Fatal("no RST_STREAM after an answer to a request still sending")
	}
	p.call(5, "/t.T/Nope")
	if h := fields(t, p.next(nil)); h["grpc-status"] != "12" || h[":status"] != "200" {
		t.Fatalf("unknown method: %v", h)
	}
	p.next(nil) // RST_STREAM NO_ERROR
	p.call(7, "/t.T/Echo")
	p.message(7, 1, []byte("x"), false)
	if h := fields(t, p.next(nil)); h["grpc-status"] != "13" {
		t.Fatalf("compressed without grpc-encoding: %v", h)
	}
	p.next(nil)
	p.call(9, "/t.T/Echo", "grpc-encoding", "gzip")
	p.message(9, 1, []byte("x"), false)
	if h := fields(t, p.next(nil)); h["grpc-status"] != "12" {
		t.Fatalf("compressed: %v", h)
	}
	p.next(nil)
	p.call(11, "/t.T/Echo", "grpc-timeout", "soon")
	if h := fields(t, p.next(nil)); h["grpc-status"] != "13" {
		t.Fatalf("bad grpc-timeout: %v", h)
	}
	p.next(nil)
	// Headers over SETTINGS_MAX_HEADER_LIST_SIZE are refused, not cut.
	p.headers(15, false, ":method", "POST", ":scheme", "http", ":path", "/t.T/Echo", ":authority", "x",
		"content-type", "application/grpc", "x-a", strings.Repeat("a", 30<<10), "x-b", strings.Repeat("b", 30<<10),
		"x-c", strings.Repeat("c", 30<<10))
	if h := fields(t, p.next(nil)); h[":status"] != "431" {
		t.Fatalf("headers over the limit: %v", h)
	}
	p.next(nil)
	// A stream id below the last one opened is a closed stream.
	p.call(3, "/t.T/Echo")
	if r, ok := p.next(nil).(*http2.RSTStreamFrame); !ok || r.StreamID != 3 || r.ErrCode != http2.ErrCodeStreamClosed {
		t.Fatalf("HEADERS on a closed stream: %v", r)
	}
	// The connection serves on.
	p.call(17, "/t.T/Echo")
	p.message(17, 0, []byte("hi"), true)
	if h := fields(t, p.next(nil)); h[":status"] != "200" || h["content-type"] != "application/grpc" {
		t.Fatalf("echo head: %v", h)
	}
	if d, ok := p.next(nil).(*http2.DataFrame); !ok || !bytes.Equal(d.Data(), []byte{0, 0, 0, 0, 2, 'h', 'i'}) {
		t.Fatalf("echo: %v", d)
	}
	if h := fields(t, p.next(nil)); h["grpc-status"] != "0" {
		t.Fatalf("echo trailers: %v", h)
	}
}

// A header block is decoded across its CONTINUATION frames; a malformed
// block (RFC 9113 §8.2, §8.3) resets its stream, the connection going on
// with its HPACK table intact; CONTINUATIONs after the block went over
// the list's bound end the connection.
func TestHeaderBlocks(t *testing.T) {
	f := start(t, h2grpc.Config{MaxHeaderListBytes: 4096}, nil)
	p := dial(t, f)
	// A block in three frames, names indexed for the blocks after it.
	p.hbuf.Reset()
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/t.T/Echo"}, {":authority", "x"},
		{"content-type", "application/grpc"}, {"x-long", strings.Repeat("v", 300)}} {
		p.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	block := bytes.Clone(p.hbuf.Bytes())
	p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:7]})
	p.fr.WriteContinuation(1, false, block[7:100])
	p.fr.WriteContinuation(1, true, block[100:])
	p.message(1, 0, []byte("hi"), true)
	if h := fields(t, p.next(nil)); h[":status"] != "200" {
		t.Fatalf("a block in three frames: %v", h)
	}
	p.next(nil) // the echo
	p.next(nil) // its trailers

	id := uint32(3)
	for name, kv := range map[string][]string{
		"upper-case name":            {"X-Upper", "1"},
		"value with a newline":       {"x-a", "1\n2"},
		"pseudo after regular":       {"x-a", "1", ":scheme", "http"},
		"pseudo twice":               {":path", "/t.T/Echo"},
		"unknown pseudo":             {":nope", "1"},
		"request and response mixed": {":status", "200"},
	} {
		p.hbuf.Reset()
		pseudo, regular := [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/t.T/Echo"}}, [][2]string{}
		for i := 0; i < len(kv); i += 2 {
			if strings.HasPrefix(kv[i], ":") && name != "pseudo after regular" {
				pseudo = append(pseudo, [2]string{kv[i], kv[i+1]})
			} else {
				regular = append(regular, [2]string{kv[i], kv[i+1]})
			}
		}
		for _, h := range append(pseudo, regular...) {
			p.enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
		}
		p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.hbuf.Bytes(), EndHeaders: true})
		if r, ok := p.next(nil).(*http2.RSTStreamFrame); !ok || r.StreamID != id || r.ErrCode != http2.ErrCodeProtocol {
			t.Fatalf("%s: %v, want RST_STREAM PROTOCOL_ERROR on stream %d", name, r, id)
		}
		id += 2
	}
	// The connection and its table serve on.
	p.call(id, "/t.T/Echo", "x-long", strings.Repeat("v", 300))
	p.message(id, 0, []byte("hi"), true)
	if h := fields(t, p.next(nil)); h[":status"] != "200" {
		t.Fatalf("after the malformed blocks: %v", h)
	}
	p.next(nil)
	p.next(nil)

	// Over the bound, then more: the connection ends.
	q := dial(t, f)
	q.hbuf.Reset()
	q.enc.WriteField(hpack.HeaderField{Name: "x-big", Value: strings.Repeat("b", 3000)})
	q.enc.WriteField(hpack.HeaderField{Name: "x-big2", Value: strings.Repeat("b", 3000)})
	q.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: q.hbuf.Bytes()})
	q.fr.WriteContinuation(1, false, bytes.Repeat([]byte{0x82}, 100))
	if got := q.goAway(); got != http2.ErrCodeProtocol {
		t.Fatalf("CONTINUATION past the bound: GOAWAY %v", got)
	}
}

// Deadlines of streams on one connection, a later stream's earlier than
// an open one's: the server resets each stream (RST_STREAM CANCEL) when
// its own grpc-timeout has passed, in that order, and no other.
func TestDeadlines(t *testing.T) {
	f := start(t, h2grpc.Config{}, func(f *fixture) {
		f.method("/t.T/Silent", func(*h2grpc.Stream, []byte) error { return nil }, nil)
	})
	p := dial(t, f)
	begin := time.Now()
	p.call(1, "/t.T/Silent", "grpc-timeout", "10S")
	p.call(3, "/t.T/Silent")
	p.call(5, "/t.T/Silent", "grpc-timeout", "300m")
	p.call(7, "/t.T/Silent", "grpc-timeout", "100m")
	for _, want := range []struct {
		id uint32
		at time.Duration
	}{{7, 100 * time.Millisecond}, {5, 300 * time.Millisecond}} {
		r, ok := p.next(nil).(*http2.RSTStreamFrame)
		if !ok || r.StreamID != want.id || r.ErrCode != http2.ErrCodeCancel {
			t.Fatalf("%v, want RST_STREAM CANCEL on stream %d", r, want.id)
		}
		if el := time.Since(begin); el < want.at {
			t.Fatalf("stream %d reset after %v, before its deadline of %v", want.id, el, want.at)
		}
	}
	// The handlers are told after the RST_STREAMs are written.
	waitFor(t, func() bool { return f.resets.Load() == 2 })
	// The others are open: a PING's answer comes before any other frame,
	// and no other handler was reset.
	p.fr.WritePing(false, [8]byte{7})
	if pg, ok := p.next(func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok }).(*http2.PingFrame); !ok || pg.Data != [8]byte{7} {
		t.Fatalf("%v, want the PING's answer", pg)
	}
	if n := f.resets.Load(); n != 2 {
		t.Fatalf("%d handlers reset, want 2", n)
	}
}

// The server sends no more than the client's windows allow: a stream
// window of 10 bytes holds a message back until WINDOW_UPDATE, and a
// PING is answered with its data.
func TestSendWindow(t *testing.T) {
	f := start(t, h2grpc.Config{}, nil)
	p := dial(t, f, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	p.call(1, "/t.T/Echo")
	msg := bytes.Repeat([]byte("z"), 25)
	p.message(1, 0, msg, false)
	fields(t, p.next(nil)) // the response's head
	d := p.next(nil).(*http2.DataFrame)
	if len(d.Data()) != 10 {
		t.Fatalf("%d bytes sent in a window of 10", len(d.Data()))
	}
	p.fr.WritePing(false, [8]byte{7, 7})
	pong := p.next(func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok }).(*http2.PingFrame)
	if !pong.IsAck() || pong.Data != [8]byte{7, 7} {
		t.Fatalf("PING answered %v", pong)
	}
	p.fr.WriteWindowUpdate(1, 100)
	got := 10
	for got < 30 {
		d := p.next(nil).(*http2.DataFrame)
		got += len(d.Data())
	}
	if got != 30 {
		t.Fatalf("%d bytes, want the message's 30", got)
	}
	// A stream's window past 2^31-1 is a stream error: that stream is
	// reset, its handler told once, and the connection goes on.
	p.fr.WriteWindowUpdate(1, 1<<31-1)
	if r, ok := p.next(nil).(*http2.RSTStreamFrame); !ok || r.StreamID != 1 || r.ErrCode != http2.ErrCodeFlowControl {
		t.Fatalf("window overflow: %v", r)
	}
	waitFor(t, func() bool { return f.resets.Load() == 1 })
	p.call(3, "/t.T/Echo")
	p.message(3, 0, []byte("ok"), true)
	if h := fields(t, p.next(nil)); h[":status"] != "200" {
		t.Fatalf("after the reset: %v", h)
	}
}

// curl, on nghttp2 (the HTTP/2 library Envoy long used), calls a method
// with prior knowledge: the answer and the trailers come back whole.
func TestCurlClient(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("no curl")
	}
	if v, err := exec.Command(curl, "-V").Output(); err != nil || !bytes.Contains(v, []byte("HTTP2")) {
		t.Skip("curl without HTTP/2")
	}
	f := start(t, h2grpc.Config{}, nil)
	dir := t.TempDir()
	msg := bytes.Repeat([]byte("kvca "), 20000) // several frames each way
	req := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(req[1:], uint32(len(msg)))
	in := filepath.Join(dir, "in")
	if err := os.WriteFile(in, req, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, curl, "-sS", "--http2-prior-knowledge", "-H", "content-type: application/grpc",
		"-H", "te: trailers", "--data-binary", "@"+in, "-D", filepath.Join(dir, "head"),
		"http://"+f.addr+"/t.T/Echo").Output()
	if err != nil {
		t.Fatalf("curl: %v", err)
	}
	if !bytes.Equal(out, req) {
		t.Fatalf("echo of %d bytes: %d bytes", len(req), len(out))
	}
	head, _ := os.ReadFile(filepath.Join(dir, "head"))
	if !bytes.Contains(head, []byte("content-type: application/grpc")) || !bytes.Contains(head, []byte("grpc-status: 0")) {
		t.Fatalf("head and trailers:\n%s", head)
	}
}
