// Package h2grpc is a gRPC server transport over cleartext HTTP/2 that
// serves every stream of a connection on the connection's own goroutine:
// it reads a frame, hands each whole gRPC message to the stream's Handler
// where it is read, writes the answers into the connection's buffer and
// flushes once the frames read are handled. There is no goroutine per
// stream and no writer goroutine. A handler that must wait (the endpoint
// picker's admission queue) moves its stream to a goroutine of its own
// with Stream.Go, for as long as it waits; the connection reads on.
//
// It serves what a gateway's gRPC client asks of an endpoint picker:
// bidirectional, server-streaming and unary methods, HTTP/2 flow control
// both ways, PING, SETTINGS, RST_STREAM, GOAWAY (a graceful stop lets the
// streams open end), grpc-timeout, and trailers-only answers for unknown
// methods. It does not serve TLS, message compression (a compressed
// message ends its stream UNIMPLEMENTED) or the HTTP/1.1 upgrade to h2c:
// gRPC clients connect with prior knowledge.
package h2grpc

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Handler receives one stream's events. Its methods are called one at a
// time, in the order the events came, never after the stream ended.
type Handler interface {
	// Message is one whole gRPC message, borrowed until it returns.
	// An error ends the stream with the error's status (Stream.Finish).
	Message(b []byte) error
	// CloseSend: the client ended its side; an error as for Message.
	CloseSend() error
	// Reset: the stream ended without an answer of the handler's own
	// (the client cancelled it, its deadline passed, the connection was
	// lost or the server stopped). Nothing more is called.
	Reset()
}

// A Releaser is a Handler told, once, that the transport will call it
// no more: the stream ended and none of its methods is running. It may
// then be reused for another stream. A stream that ended outside its
// handler's calls (a compressed message the transport refused) is not
// released; its handler is left to the collector.
type Releaser interface {
	Release()
}

// Method opens a Handler for a new stream of one method.
type Method func(s *Stream) Handler

// Config is the transport's configuration; the zero value is usable.
type Config struct {
	// MaxMessageBytes bounds one message received or sent. Default 16 MiB.
	MaxMessageBytes int
	// MaxConcurrentStreams bounds the streams open on one connection
	// (SETTINGS_MAX_CONCURRENT_STREAMS); a stream over it is refused.
	// Default 16384.
	MaxConcurrentStreams int
	// StreamWindow and ConnWindow are the receive windows offered, per
	// stream and per connection. Defaults 1 MiB and 16 MiB.
	StreamWindow, ConnWindow int
	// MaxHeaderListBytes bounds a stream's request headers. Default 64 KiB.
	MaxHeaderListBytes int
	// PrefaceTimeout bounds the wait for a new connection's preface.
	// Default 10s.
	PrefaceTimeout time.Duration
	// Logger receives connection errors. Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = 16 << 20
	}
	if c.MaxConcurrentStreams <= 0 {
		c.MaxConcurrentStreams = 16384
	}
	if c.StreamWindow <= 0 {
		c.StreamWindow = 1 << 20
	}
	if c.ConnWindow <= 0 {
		c.ConnWindow = 16 << 20
	}
	c.StreamWindow = min(c.StreamWindow, maxWindow)
	c.ConnWindow = max(min(c.ConnWindow, maxWindow), initialWindow)
	if c.MaxHeaderListBytes <= 0 {
		c.MaxHeaderListBytes = 64 << 10
	}
	if c.PrefaceTimeout <= 0 {
		c.PrefaceTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// HTTP/2's window bounds (RFC 9113 §6.9).
const (
	initialWindow = 65535
	maxWindow     = 1<<31 - 1
)

// ErrStopped is what Serve returns after Stop or GracefulStop.
var ErrStopped = errors.New("h2grpc: server stopped")

// Server serves gRPC methods on the connections of its listeners.
type Server struct {
	cfg     Config
	methods map[string]Method

	mu         sync.Mutex
	listeners  map[net.Listener]struct{}
	conns      map[*conn]struct{}
	stopping   bool           // GracefulStop or Stop began
	goroutines sync.WaitGroup // connections' readers and streams' own goroutines
	idle       *sync.Cond     // signalled when a connection closes
}

// New returns a server with no methods.
func New(cfg Config) *Server {
	cfg.defaults()
	s := &Server{cfg: cfg, methods: map[string]Method{}, listeners: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{}}
	s.idle = sync.NewCond(&s.mu)
	return s
}

// Handle serves method (its path, "/package.Service/Method") with m. It
// must be called before Serve.
func (s *Server) Handle(method string, m Method) { s.methods[method] = m }

// Serve accepts connections on l until it fails or the server stops; it
// then returns ErrStopped, or the listener's error.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		l.Close()
		return ErrStopped
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			stopping := s.stopping
			s.mu.Unlock()
			if stopping {
				return ErrStopped
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of descriptors and the like: wait, as net/http does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := newConn(s, nc)
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.goroutines.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// GracefulStop stops accepting connections, tells every connection's
// client with GOAWAY that no new stream will be served, and returns once
// the streams open have ended and their connections closed.
func (s *Server) GracefulStop() {
	s.mu.Lock()
	s.stopping = true
	s.closeListeners()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.goAway()
	}
	s.mu.Lock()
	for len(s.conns) > 0 {
		s.idle.Wait()
	}
	s.mu.Unlock()
	s.goroutines.Wait()
}

// Stop closes every listener and connection at once: the streams open
// are reset (Handler.Reset). It returns once their goroutines are done.
func (s *Server) Stop() {
	s.mu.Lock()
	s.stopping = true
	s.closeListeners()
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	s.goroutines.Wait()
}

func (s *Server) closeListeners() {
	for l := range s.listeners {
		l.Close()
	}
}

func (s *Server) closed(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.idle.Broadcast()
	s.mu.Unlock()
}

// Error is the status err stands for: its own when it has one, else
// UNKNOWN with its text.
func statusOf(err error) (codes.Code, string) {
	if err == nil {
		return codes.OK, ""
	}
	st, _ := status.FromError(err)
	return st.Code(), st.Message()
}
