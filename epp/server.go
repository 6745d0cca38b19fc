package epp

import (
	"log/slog"
	"net"
	"sync"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"

	"github.com/kvca/kvca/h2grpc"
)

// BodyMode is how Envoy sends a body to the picker (ext_proc's
// ProcessingMode.BodySendMode).
type BodyMode = filterv3.ProcessingMode_BodySendMode

// The body modes the picker speaks.
const (
	ModeNone       = filterv3.ProcessingMode_NONE
	ModeStreamed   = filterv3.ProcessingMode_STREAMED
	ModeBuffered   = filterv3.ProcessingMode_BUFFERED
	ModePartial    = filterv3.ProcessingMode_BUFFERED_PARTIAL
	ModeFullDuplex = filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
)

// Config is the picker server's configuration; the zero value is usable.
type Config struct {
	// MaxMessageBytes bounds one ext_proc message; a BUFFERED body comes
	// in one. Default 16 MiB.
	MaxMessageBytes int
	// ReadyEvery is how often readiness is read from Proxy.Ready for
	// health watchers (a Check reads it at once). Default 1s.
	ReadyEvery time.Duration
	// RequestBodyMode and ResponseBodyMode are the modes assumed when
	// Envoy does not say them in the stream's protocol configuration
	// (Envoy builds before it existed). Default FULL_DUPLEX_STREAMED,
	// the mode the protocol requires pickers to support.
	RequestBodyMode, ResponseBodyMode BodyMode
	// SendBodyWithoutWaiting is assumed with the modes above: Envoy
	// sends a STREAMED body without waiting for the headers' answer.
	SendBodyWithoutWaiting bool
	// Logger receives stream failures. Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = 16 << 20
	}
	if c.ReadyEvery <= 0 {
		c.ReadyEvery = time.Second
	}
	if c.RequestBodyMode == ModeNone {
		c.RequestBodyMode = ModeFullDuplex
	}
	if c.ResponseBodyMode == ModeNone {
		c.ResponseBodyMode = ModeFullDuplex
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Server is kvca as an ext_proc endpoint picker: the ExternalProcessor
// service and the gRPC health service, on a gRPC transport of kvca's own
// (h2grpc) that serves a connection's streams on the connection's
// goroutine: a stream costs no goroutine of its own unless its pick
// waits for admission.
type Server struct {
	proxy  Proxy
	cfg    Config
	rpc    *h2grpc.Server
	health *health

	count   counters     // streams, messages, bytes and handling time (metrics.go)
	bodies  bodies       // request body buffers (bodies.go)
	arenas  headerArenas // header fields decoded by hand (headers.go)
	streams sync.Pool    // streams released, for the next ones (stream.go)

	mu      sync.Mutex // polling's start against a stop
	polled  bool       // the readiness poller started
	halted  bool       // Stop or GracefulStop began
	stop    chan struct{}
	polling sync.WaitGroup
}

// The methods served, as gRPC paths.
const (
	processMethod = "/" + ExtProcService + "/Process"
	checkMethod   = "/grpc.health.v1.Health/Check"
	watchMethod   = "/grpc.health.v1.Health/Watch"
)

// New returns a picker server over p.
func New(p Proxy, cfg Config) *Server {
	cfg.defaults()
	s := &Server{proxy: p, cfg: cfg, stop: make(chan struct{})}
	s.count.init()
	s.rpc = h2grpc.New(h2grpc.Config{MaxMessageBytes: cfg.MaxMessageBytes, Logger: cfg.Logger})
	s.health = newHealth(p.Ready)
	s.rpc.Handle(processMethod, s.open)
	s.rpc.Handle(checkMethod, s.health.check)
	s.rpc.Handle(watchMethod, s.health.watch)
	return s
}

// Serve serves the picker on l until Stop or GracefulStop; it then
// returns nil.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if !s.polled && !s.halted {
		s.polled = true
		s.health.refresh()
		s.polling.Add(1)
		go s.pollReady()
	}
	s.mu.Unlock()
	if err := s.rpc.Serve(l); err != h2grpc.ErrStopped {
		return err
	}
	return nil
}

// pollReady keeps the readiness statuses current for Watch callers,
// who are told only of changes.
func (s *Server) pollReady() {
	defer s.polling.Done()
	t := time.NewTicker(s.cfg.ReadyEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.health.refresh()
		}
	}
}

// GracefulStop reports NOT_SERVING on every health service and ends the
// health watches, so the gateway stops sending, then waits for the open
// streams to end.
func (s *Server) GracefulStop() {
	s.halt()
	s.rpc.GracefulStop()
}

// Stop closes every stream and connection at once; streams open end
// with End(true).
func (s *Server) Stop() {
	s.halt()
	s.rpc.Stop()
}

func (s *Server) halt() {
	s.mu.Lock()
	if !s.halted {
		s.halted = true
		close(s.stop)
		s.health.shutdown()
	}
	s.mu.Unlock()
	s.polling.Wait()
}
