// Command grpcfloor is the floor under kvca's endpoint picker: an ext_proc
// server on grpc-go, with gRPC's default codec, that does only what a picker
// must: it answers every message with the smallest valid answer
// (the request body streamed back, the first backend picked, the response
// passed through). What it costs per request is grpc-go's own cost for
// one ext_proc stream in FULL_DUPLEX_STREAMED mode; kvca as picker minus
// this is kvca's own work.
//
// It takes the command line kvca-bench picker-cost gives kvca serve, so
// that the same bench measures both:
//
//	kvca-bench picker-cost --kvca bin/grpcfloor --modes picker
//
// Of that command line it reads --listen (an HTTP server answering 200 to
// anything, for the bench's readiness check), --ext-proc and the first
// --backend, and ignores the rest.
package main

import (
	"io"
	"log"
	"os"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvca/kvca/epp"
	"github.com/kvca/kvca/scripts/compare/floor"
)

type floorServer struct {
	extprocv3.UnimplementedExternalProcessorServer
	pick *extprocv3.ProcessingResponse
}

func (f *floorServer) Process(st extprocv3.ExternalProcessor_ProcessServer) error {
	var held []*extprocv3.HttpBody // the request body until its end: the pick comes first
	for {
		req, err := st.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		switch r := req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestBody:
			if held = append(held, r.RequestBody); !r.RequestBody.EndOfStream {
				continue
			}
			err = st.Send(f.pick)
			for _, b := range held {
				if err == nil {
					err = st.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
						RequestBody: floor.StreamedBack(b)}})
				}
			}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			err = st.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extprocv3.HeadersResponse{}}})
		case *extprocv3.ProcessingRequest_ResponseBody:
			err = st.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
				ResponseBody: floor.StreamedBack(r.ResponseBody)}})
		}
		if err != nil {
			return err
		}
	}
}

func main() {
	l, backend := floor.Start("grpcfloor", os.Args[1:])
	// As many stream workers as kvca's picker keeps.
	gs := grpc.NewServer(grpc.NumStreamWorkers(64))
	extprocv3.RegisterExternalProcessorServer(gs, &floorServer{pick: floor.Pick(backend)})
	hs := health.NewServer()
	hs.SetServingStatus(epp.ReadinessService, healthgrpc.HealthCheckResponse_SERVING)
	healthgrpc.RegisterHealthServer(gs, hs)
	log.Fatal(gs.Serve(l))
}
