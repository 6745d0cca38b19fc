// Package floor is what the picker floors (grpcfloor, h2floor) share: kvca
// serve's command line as kvca-bench picker-cost gives it, the HTTP
// listener the bench waits on, and the pick they all answer.
package floor

import (
	"log"
	"net"
	"net/http"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvca/kvca/epp"
)

// Start reads --listen, --ext-proc and the first --backend of args (kvca
// serve's, the rest ignored), serves an HTTP listener on --listen that
// answers 200 to anything (the bench's readiness check) and returns the
// ext_proc listener and the backend's address. It exits on an error.
func Start(name string, args []string) (net.Listener, string) {
	var listen, ext, backend string
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--listen":
			listen = args[i+1]
		case "--ext-proc":
			ext = args[i+1]
		case "--backend":
			if backend == "" {
				backend = strings.TrimPrefix(args[i+1], "http://")
			}
		}
	}
	if listen == "" || ext == "" || backend == "" {
		log.Fatal(name + ": want --listen, --ext-proc and --backend (as kvca serve has them)")
	}
	l, err := net.Listen("tcp", ext)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		log.Fatal(http.ListenAndServe(listen, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	}()
	return l, backend
}

// Pick is the request headers' answer naming ep, in the header and the
// metadata, as the endpoint picker protocol has it.
func Pick(ep string) *extprocv3.ProcessingResponse {
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

// StreamedBack is the answer that streams body chunk b back unchanged
// (FULL_DUPLEX_STREAMED: the gateway forwards only what comes back).
func StreamedBack(b *extprocv3.HttpBody) *extprocv3.BodyResponse {
	return &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
			Body: b.Body, EndOfStream: b.EndOfStream}}}}}
}
