package epp

import (
	"log/slog"
	"net"
	"sync"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
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
	// StreamWorkers is how many goroutines serve streams and are kept
	// for the next one (a stream beyond them gets a goroutine of its
	// own): a stream's goroutine grows its stack through the request's
	// lifecycle, and a new goroutine per stream paid that growth on
	// every request. Default 64; negative: a goroutine per stream.
	StreamWorkers int
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
	if c.StreamWorkers == 0 {
		c.StreamWorkers = 64
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Server is kvca as an ext_proc endpoint picker: the ExternalProcessor
// service and the gRPC health service on one gRPC server.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	proxy  Proxy
	cfg    Config
	gs     *grpc.Server
	health *healthService

	count counters // streams, messages, bytes and handling time (metrics.go)

	pollOnce sync.Once
	stopOnce sync.Once
	stop     chan struct{}
	polling  sync.WaitGroup
}

// New returns a picker server over p.
func New(p Proxy, cfg Config) *Server {
	cfg.defaults()
	s := &Server{proxy: p, cfg: cfg, stop: make(chan struct{})}
	s.count.init()
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes),
		grpc.MaxSendMsgSize(cfg.MaxMessageBytes),
		// Envoy keeps its ext_proc connection open with pings; allow
		// them rather than closing the connection on a "too many pings".
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// The server's own codec: the bodies without the default one's
		// copies (codec.go).
		grpc.ForceServerCodecV2(codec{}),
	}
	if cfg.StreamWorkers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(uint32(cfg.StreamWorkers)))
	}
	s.gs = grpc.NewServer(opts...)
	s.health = newHealthService(p.Ready)
	extprocv3.RegisterExternalProcessorServer(s.gs, s)
	healthgrpc.RegisterHealthServer(s.gs, s.health)
	return s
}

// Serve serves the picker on l until Stop or GracefulStop.
func (s *Server) Serve(l net.Listener) error {
	s.pollOnce.Do(func() {
		s.health.refresh()
		s.polling.Add(1)
		go s.pollReady()
	})
	return s.gs.Serve(l)
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

// GracefulStop reports NOT_SERVING on every health service, so the
// gateway stops sending, then waits for the open streams to end.
func (s *Server) GracefulStop() {
	s.halt()
	s.gs.GracefulStop()
}

// Stop closes every stream and connection at once; streams open end
// with End(true).
func (s *Server) Stop() {
	s.halt()
	s.gs.Stop()
}

func (s *Server) halt() {
	s.stopOnce.Do(func() {
		close(s.stop)
		s.health.Shutdown()
	})
	s.polling.Wait()
}
