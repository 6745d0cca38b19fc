// Command h2floor is the floor under kvca's endpoint picker on its own
// transport: the same smallest valid ext_proc answers as grpcfloor (the
// request body streamed back, the first backend picked, the response
// passed through), encoded with protobuf's generated code, served by
// h2grpc, the transport kvca's picker runs on. What it costs per request is
// the transport's and protobuf's cost for one ext_proc stream in
// FULL_DUPLEX_STREAMED mode; kvca as picker minus this is kvca's own work:
//
//	kvca-bench picker-cost --kvca bin/h2floor --modes picker
//
// Like grpcfloor it reads --listen, --ext-proc and the first --backend of
// kvca serve's command line and ignores the rest; with
// H2FLOOR_CPUPROFILE=FILE in its environment it writes a CPU profile there
// when it is stopped.
package main

import (
	"log"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
	"syscall"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/kvca/kvca/h2grpc"
	"github.com/kvca/kvca/scripts/compare/floor"
)

// process is one ext_proc stream.
type process struct {
	s    *h2grpc.Stream
	pick []byte
	held []*extprocv3.HttpBody // the request body until its end: the pick comes first
	bufs *sync.Pool            // answer buffers, shared by the streams as the bare transport's were
	buf  *[]byte
}

func (p *process) Message(b []byte) error {
	req := &extprocv3.ProcessingRequest{}
	// Unmarshal copies the bytes fields: b is on loan.
	if err := proto.Unmarshal(b, req); err != nil {
		return err
	}
	switch r := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestBody:
		if p.held = append(p.held, r.RequestBody); !r.RequestBody.EndOfStream {
			return nil
		}
		if err := p.s.Send(p.pick); err != nil {
			return err
		}
		for _, b := range p.held {
			if err := p.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
				RequestBody: floor.StreamedBack(b)}}); err != nil {
				return err
			}
		}
		p.held = nil
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return p.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: &extprocv3.HeadersResponse{}}})
	case *extprocv3.ProcessingRequest_ResponseBody:
		return p.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: floor.StreamedBack(r.ResponseBody)}})
	}
	return nil
}

// send marshals m into a pooled buffer: Send copies it out.
func (p *process) send(m proto.Message) error {
	if p.buf == nil {
		p.buf, _ = p.bufs.Get().(*[]byte)
		if p.buf == nil {
			p.buf = new([]byte)
		}
	}
	b, err := proto.MarshalOptions{}.MarshalAppend((*p.buf)[:0], m)
	if err != nil {
		return err
	}
	*p.buf = b
	return p.s.Send(b)
}

// done gives the stream's buffer back.
func (p *process) done() {
	if p.buf != nil {
		p.bufs.Put(p.buf)
		p.buf = nil
	}
}

func (p *process) CloseSend() error { p.done(); p.s.Finish(nil); return nil }
func (p *process) Reset()           { p.done() }

// check answers a health Check SERVING.
type check struct{ s *h2grpc.Stream }

func (c check) Message([]byte) error { return nil }
func (c check) CloseSend() error {
	b, _ := proto.Marshal(&healthgrpc.HealthCheckResponse{Status: healthgrpc.HealthCheckResponse_SERVING})
	if err := c.s.Send(b); err != nil {
		return err
	}
	c.s.Finish(nil)
	return nil
}
func (c check) Reset() {}

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
	pick, err := proto.Marshal(floor.Pick(backend))
	if err != nil {
		log.Fatal(err)
	}
	srv := h2grpc.New(h2grpc.Config{})
	var bufs sync.Pool
	srv.Handle("/envoy.service.ext_proc.v3.ExternalProcessor/Process", func(s *h2grpc.Stream) h2grpc.Handler {
		return &process{s: s, pick: pick, bufs: &bufs}
	})
	srv.Handle("/grpc.health.v1.Health/Check", func(s *h2grpc.Stream) h2grpc.Handler { return check{s} })
	log.Fatal(srv.Serve(l))
}
