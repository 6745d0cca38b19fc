package eppcheck

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// The protocol's names, spelled here rather than imported from kvca's
// picker: the tool checks pickers, kvca's included, from the outside.
const (
	destHeader   = "x-gateway-destination-endpoint"
	destNS       = "envoy.lb"
	servedKey    = "x-gateway-destination-endpoint-served"
	subsetNS     = "envoy.lb.subset_hint"
	subsetKey    = "x-gateway-destination-endpoint-subset"
	extProcName  = "envoy.service.ext_proc.v3.ExternalProcessor"
	maxStreamed  = 64 << 10 // Envoy's recommended bound on one streamed chunk
	fullDuplex   = filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	buffered     = filterv3.ProcessingMode_BUFFERED
	streamedMode = filterv3.ProcessingMode_STREAMED
)

// envoyStream is one ext_proc stream with the picker, driven as Envoy
// drives it: sends from the check, answers read by a goroutine of its
// own so that a picker that buffers never blocks a send.
type envoyStream struct {
	c       extprocv3.ExternalProcessor_ProcessClient
	cancel  context.CancelFunc
	answers chan answer
	wait    time.Duration
}

type answer struct {
	r   *extprocv3.ProcessingResponse
	err error // the stream's end: io.EOF, a status, a cancellation
}

func openStream(ctx context.Context, conn *grpc.ClientConn, wait time.Duration) (*envoyStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	c, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &envoyStream{c: c, cancel: cancel, answers: make(chan answer, 256), wait: wait}
	go func() {
		for {
			r, err := c.Recv()
			// A check that stopped reading has cancelled the stream:
			// leave rather than wait on it for ever.
			select {
			case s.answers <- answer{r, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return s, nil
}

func (s *envoyStream) close() { s.cancel() }

func (s *envoyStream) send(r *extprocv3.ProcessingRequest) error {
	if err := s.c.Send(r); err != nil {
		return fmt.Errorf("sending to the picker: %w", err)
	}
	return nil
}

var errNoAnswer = errors.New("no answer in time")

// next returns the picker's next answer, or the stream's end as error.
func (s *envoyStream) next() (*extprocv3.ProcessingResponse, error) {
	select {
	case a := <-s.answers:
		return a.r, a.err
	case <-time.After(s.wait):
		return nil, errNoAnswer
	}
}

func protocolConfig(req, resp filterv3.ProcessingMode_BodySendMode, noWait bool) *extprocv3.ProtocolConfiguration {
	return &extprocv3.ProtocolConfiguration{RequestBodyMode: req, ResponseBodyMode: resp, SendBodyWithoutWaitingForHeaderResponse: noWait}
}

func headerMap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

func requestHeaders(pc *extprocv3.ProtocolConfiguration, md *corev3.Metadata, method, path string, eos bool, extra ...string) *extprocv3.ProcessingRequest {
	kv := append([]string{":method", method, ":path", path, ":authority", "eppcheck", ":scheme", "http",
		"content-type", "application/json", "x-request-id", fmt.Sprintf("eppcheck-%d", time.Now().UnixNano())}, extra...)
	return &extprocv3.ProcessingRequest{
		ProtocolConfig:  pc,
		MetadataContext: md,
		Request:         &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...), EndOfStream: eos}},
	}
}

func requestBody(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}}
}

func responseHeaders(md *corev3.Metadata, eos bool, kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{
		MetadataContext: md,
		Request:         &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...), EndOfStream: eos}},
	}
}

func responseBody(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}}
}

// servedMetadata is what the gateway reports of the endpoint that
// answered, in the response's filter metadata.
func servedMetadata(ep string) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		destNS: {Fields: map[string]*structpb.Value{servedKey: structpb.NewStringValue(ep)}},
	}}
}

func subsetMetadata(v *structpb.Value) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		subsetNS: {Fields: map[string]*structpb.Value{subsetKey: v}},
	}}
}

func stringList(s ...string) *structpb.Value {
	vs := make([]*structpb.Value, len(s))
	for i, e := range s {
		vs[i] = structpb.NewStringValue(e)
	}
	return structpb.NewListValue(&structpb.ListValue{Values: vs})
}

// pickOf reads the pick an answer carries: the destination header's
// value among its header mutations, and the dynamic metadata's.
func pickOf(r *extprocv3.ProcessingResponse, c *extprocv3.CommonResponse) (header, metadata string, hv *corev3.HeaderValueOption) {
	for _, h := range c.GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == destHeader {
			hv = h
			header = string(h.GetHeader().GetRawValue())
			if header == "" {
				header = h.GetHeader().GetValue()
			}
		}
	}
	metadata = r.GetDynamicMetadata().GetFields()[destNS].GetStructValue().GetFields()[destHeader].GetStringValue()
	return header, metadata, hv
}

// commonOf is the common response of a headers or body answer.
func commonOf(r *extprocv3.ProcessingResponse) *extprocv3.CommonResponse {
	switch v := r.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		return v.RequestHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_RequestBody:
		return v.RequestBody.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		return v.ResponseHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseBody:
		return v.ResponseBody.GetResponse()
	}
	return nil
}

func kind(r *extprocv3.ProcessingResponse) string {
	switch r.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		return "request headers answer"
	case *extprocv3.ProcessingResponse_RequestBody:
		return "request body answer"
	case *extprocv3.ProcessingResponse_RequestTrailers:
		return "request trailers answer"
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		return "response headers answer"
	case *extprocv3.ProcessingResponse_ResponseBody:
		return "response body answer"
	case *extprocv3.ProcessingResponse_ResponseTrailers:
		return "response trailers answer"
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		return fmt.Sprintf("immediate response %d", r.GetImmediateResponse().GetStatus().GetCode())
	}
	return fmt.Sprintf("%T", r.GetResponse())
}
