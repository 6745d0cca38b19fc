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
	"net"
	"net/http"
	"os"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvca/kvca/epp"
)

type floor struct {
	extprocv3.UnimplementedExternalProcessorServer
	pick *extprocv3.ProcessingResponse
}

func (f *floor) Process(st extprocv3.ExternalProcessor_ProcessServer) error {
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
						RequestBody: streamedBack(b)}})
				}
			}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			err = st.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extprocv3.HeadersResponse{}}})
		case *extprocv3.ProcessingRequest_ResponseBody:
			err = st.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
				ResponseBody: streamedBack(r.ResponseBody)}})
		}
		if err != nil {
			return err
		}
	}
}

func streamedBack(b *extprocv3.HttpBody) *extprocv3.BodyResponse {
	return &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
			Body: b.Body, EndOfStream: b.EndOfStream}}}}}
}

// pickOf is the request headers' answer naming ep, in the header and the
// metadata, as the endpoint picker protocol has it.
func pickOf(ep string) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{ClearRouteCache: true, HeaderMutation: &extprocv3.HeaderMutation{
				SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: epp.DestinationHeader, RawValue: []byte(ep)}}}}}}},
		DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			epp.DestinationNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				epp.DestinationHeader: structpb.NewStringValue(ep)}}),
		}},
	}
}

func main() {
	var listen, ext, backend string
	for i := 1; i+1 < len(os.Args); i++ {
		switch os.Args[i] {
		case "--listen":
			listen = os.Args[i+1]
		case "--ext-proc":
			ext = os.Args[i+1]
		case "--backend":
			if backend == "" {
				backend = strings.TrimPrefix(os.Args[i+1], "http://")
			}
		}
	}
	if listen == "" || ext == "" || backend == "" {
		log.Fatal("grpcfloor: want --listen, --ext-proc and --backend (as kvca serve has them)")
	}
	l, err := net.Listen("tcp", ext)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		log.Fatal(http.ListenAndServe(listen, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	}()
	// As many stream workers as kvca's picker keeps.
	gs := grpc.NewServer(grpc.NumStreamWorkers(64))
	extprocv3.RegisterExternalProcessorServer(gs, &floor{pick: pickOf(backend)})
	hs := health.NewServer()
	hs.SetServingStatus(epp.ReadinessService, healthgrpc.HealthCheckResponse_SERVING)
	healthgrpc.RegisterHealthServer(gs, hs)
	log.Fatal(gs.Serve(l))
}
