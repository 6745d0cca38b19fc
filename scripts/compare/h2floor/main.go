// Command h2floor is the floor under an endpoint picker that brings its own
// gRPC transport: the same smallest valid ext_proc answers as grpcfloor
// (the request body streamed back, the first backend picked, the response
// passed through), served by one goroutine per HTTP/2 connection over
// x/net/http2's framer and HPACK, with no goroutine per stream, no writer
// goroutine and one flush per batch of frames read. It measures what such a
// transport could save against grpc-go's floor, before any is built:
//
//	kvca-bench picker-cost --kvca bin/h2floor --modes picker
//
// It is a measuring tool, not a server for a gateway: it speaks cleartext
// HTTP/2 with prior knowledge, serves only ext_proc's Process and the
// health service's Check, and treats a protocol error by closing the
// connection. Like grpcfloor it reads --listen, --ext-proc and the first
// --backend of kvca serve's command line and ignores the rest; with
// H2FLOOR_CPUPROFILE=FILE in its environment it writes a CPU profile there
// when it is stopped. Both floors decode and encode with protobuf's
// generated code, so that the two differ in their transport only.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/kvca/kvca/scripts/compare/floor"
)

// The windows offered to the peer; window updates go out once a quarter
// of one is used.
const (
	streamWindow = 1 << 20
	connWindow   = 16 << 20
)

const (
	pathProcess = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
	pathCheck   = "/grpc.health.v1.Health/Check"
)

type stream struct {
	id       uint32
	check    bool
	in       []byte // bytes of gRPC messages not yet whole
	unacked  int    // bytes read since the last window update
	send     int64  // the peer's window for this stream
	out      []byte // framed messages, out[sent:] waiting for window
	sent     int
	headers  bool // response headers sent
	trailers bool // trailers go once out is empty
	held     [][]byte
}

type conn struct {
	br       *bufio.Reader
	bw       *bufio.Writer
	fr       *http2.Framer
	henc     *hpack.Encoder
	hbuf     bytes.Buffer
	streams  map[uint32]*stream
	send     int64 // the peer's window for the connection
	initSend int64 // the peer's initial stream window
	maxFrame int
	unacked  int
	pick     []byte   // the pick, framed
	free     [][]byte // buffers of ended streams, for the next ones
}

func (c *conn) buf() []byte {
	if n := len(c.free); n > 0 {
		b := c.free[n-1]
		c.free = c.free[:n-1]
		return b[:0]
	}
	return nil
}

func (c *conn) drop(st *stream) {
	delete(c.streams, st.id)
	if len(c.free) < 64 {
		c.free = append(c.free, st.in, st.out)
	}
	st.in, st.out = nil, nil
}

func serve(nc net.Conn, pick []byte) {
	defer nc.Close()
	c := &conn{br: bufio.NewReaderSize(nc, 64<<10), bw: bufio.NewWriterSize(nc, 64<<10),
		streams: map[uint32]*stream{}, send: 65535, initSend: 65535, maxFrame: 16384, pick: pick}
	c.fr = http2.NewFramer(c.bw, c.br)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.SetMaxReadFrameSize(1 << 20)
	c.henc = hpack.NewEncoder(&c.hbuf)
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c.br, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20})
	c.fr.WriteWindowUpdate(0, connWindow-65535)
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return
		}
		if err := c.frame(f); err != nil {
			log.Print("h2floor: ", err)
			return
		}
		if c.br.Buffered() == 0 {
			if c.bw.Flush() != nil {
				return
			}
		}
	}
}

func (c *conn) frame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		err := f.ForeachSetting(func(s http2.Setting) error {
			switch s.ID {
			case http2.SettingInitialWindowSize:
				d := int64(s.Val) - c.initSend
				c.initSend = int64(s.Val)
				for _, st := range c.streams {
					st.send += d
				}
			case http2.SettingMaxFrameSize:
				c.maxFrame = int(s.Val)
			}
			return nil
		})
		if err != nil {
			return err
		}
		return c.fr.WriteSettingsAck()
	case *http2.PingFrame:
		if !f.IsAck() {
			return c.fr.WritePing(true, f.Data)
		}
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			c.send += int64(f.Increment)
			for _, st := range c.streams {
				if err := c.pump(st); err != nil {
					return err
				}
			}
			return nil
		}
		if st := c.streams[f.StreamID]; st != nil {
			st.send += int64(f.Increment)
			return c.pump(st)
		}
	case *http2.RSTStreamFrame:
		if st := c.streams[f.StreamID]; st != nil {
			c.drop(st)
		}
	case *http2.GoAwayFrame:
		return errors.New("goaway")
	case *http2.MetaHeadersFrame:
		st := c.streams[f.StreamID]
		if st == nil {
			st = &stream{id: f.StreamID, send: c.initSend, in: c.buf(), out: c.buf()}
			switch p := f.PseudoValue("path"); p {
			case pathProcess:
			case pathCheck:
				st.check = true
			default:
				return errors.New("unknown method " + p)
			}
			c.streams[f.StreamID] = st
		}
		if f.StreamEnded() {
			return c.end(st)
		}
	case *http2.DataFrame:
		st := c.streams[f.StreamID]
		n := int(f.Length)
		if c.unacked += n; c.unacked >= connWindow/4 {
			c.fr.WriteWindowUpdate(0, uint32(c.unacked))
			c.unacked = 0
		}
		if st == nil {
			return nil
		}
		st.in = append(st.in, f.Data()...)
		off := 0
		for len(st.in)-off >= 5 {
			l := int(binary.BigEndian.Uint32(st.in[off+1 : off+5]))
			if len(st.in)-off < 5+l {
				break
			}
			// Unmarshal copies the bytes fields: in is reused.
			if err := c.message(st, st.in[off+5:off+5+l]); err != nil {
				return err
			}
			off += 5 + l
		}
		st.in = st.in[:copy(st.in, st.in[off:])]
		if f.StreamEnded() {
			return c.end(st)
		}
		if st.unacked += n; st.unacked >= streamWindow/4 {
			c.fr.WriteWindowUpdate(st.id, uint32(st.unacked))
			st.unacked = 0
		}
	}
	return nil
}

// message answers one whole gRPC message of st.
func (c *conn) message(st *stream, b []byte) error {
	if st.check {
		return c.reply(st, &healthgrpc.HealthCheckResponse{Status: healthgrpc.HealthCheckResponse_SERVING})
	}
	var req extprocv3.ProcessingRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		return err
	}
	switch r := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestBody:
		if st.held = append(st.held, r.RequestBody.Body); !r.RequestBody.EndOfStream {
			return nil
		}
		st.out = append(st.out, c.pick...)
		for i, b := range st.held {
			if err := c.reply(st, streamedBack(&extprocv3.HttpBody{Body: b, EndOfStream: i == len(st.held)-1}, true)); err != nil {
				return err
			}
		}
		st.held = nil
		return c.pump(st)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return c.reply(st, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: &extprocv3.HeadersResponse{}}})
	case *extprocv3.ProcessingRequest_ResponseBody:
		return c.reply(st, streamedBack(r.ResponseBody, false))
	}
	return nil
}

func (c *conn) reply(st *stream, m proto.Message) error {
	out, err := appendMessage(st.out, m)
	if err != nil {
		return err
	}
	st.out = out
	return c.pump(st)
}

// appendMessage appends m as a gRPC message: uncompressed, its length,
// then its bytes, marshalled in place.
func appendMessage(dst []byte, m proto.Message) ([]byte, error) {
	at := len(dst)
	out, err := proto.MarshalOptions{}.MarshalAppend(append(dst, 0, 0, 0, 0, 0), m)
	if err != nil {
		return nil, err
	}
	binary.BigEndian.PutUint32(out[at+1:], uint32(len(out)-at-5))
	return out, nil
}

// end: the peer closed its side; the trailers follow what is left to send.
func (c *conn) end(st *stream) error {
	st.trailers = true
	return c.pump(st)
}

// pump sends what st has to send as far as the windows let it.
func (c *conn) pump(st *stream) error {
	if !st.headers && (len(st.out) > st.sent || st.trailers) {
		if err := c.headers(st, false, ":status", "200", "content-type", "application/grpc"); err != nil {
			return err
		}
		st.headers = true
	}
	for st.sent < len(st.out) && st.send > 0 && c.send > 0 {
		n := min(len(st.out)-st.sent, c.maxFrame, int(st.send), int(c.send))
		if err := c.fr.WriteData(st.id, false, st.out[st.sent:st.sent+n]); err != nil {
			return err
		}
		st.sent, st.send, c.send = st.sent+n, st.send-int64(n), c.send-int64(n)
	}
	if st.sent == len(st.out) {
		st.out, st.sent = st.out[:0], 0
		if st.trailers {
			c.drop(st)
			return c.headers(st, true, "grpc-status", "0")
		}
	}
	return nil
}

func (c *conn) headers(st *stream, end bool, kv ...string) error {
	c.hbuf.Reset()
	for i := 0; i < len(kv); i += 2 {
		c.henc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: c.hbuf.Bytes(), EndStream: end, EndHeaders: true})
}

// streamedBack is the answer streaming b back, to the request's body or
// the response's.
func streamedBack(b *extprocv3.HttpBody, request bool) *extprocv3.ProcessingResponse {
	br := floor.StreamedBack(b)
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
}

// pickOf is the pick naming ep, as a gRPC message.
func pickOf(ep string) []byte {
	b, err := appendMessage(nil, floor.Pick(ep))
	if err != nil {
		log.Fatal(err)
	}
	return b
}

func main() {
	l, backend := floor.Start("h2floor", os.Args[1:])
	if p := os.Getenv("H2FLOOR_CPUPROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			log.Fatal(err)
		}
		pprof.StartCPUProfile(f)
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
		go func() { <-sig; pprof.StopCPUProfile(); f.Close(); os.Exit(0) }()
	}
	pick := pickOf(backend)
	for {
		nc, err := l.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(nc, pick)
	}
}
