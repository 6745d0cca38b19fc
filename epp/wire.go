package epp

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// pickMutation is the pick as a header mutation: the destination header
// overwrites any the client sent (a client must not choose its own
// endpoint), and the route is recomputed since routes may match on it.
// add are the pick's other request headers (the prefill worker of a
// disaggregated request); a client's own PrefillerHeader is removed when
// the pick names none, since a client must not choose its prefill worker
// either.
func pickMutation(dest string, add [][2]string) *extprocv3.CommonResponse {
	set := []*corev3.HeaderValueOption{{
		Header:       &corev3.HeaderValue{Key: DestinationHeader, RawValue: []byte(dest)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}}
	prefiller := false
	for _, h := range add {
		k := strings.ToLower(h[0])
		prefiller = prefiller || k == PrefillerHeader
		set = append(set, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: k, RawValue: []byte(h[1])},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	m := &extprocv3.HeaderMutation{SetHeaders: set}
	if !prefiller {
		m.RemoveHeaders = []string{PrefillerHeader}
	}
	return &extprocv3.CommonResponse{ClearRouteCache: true, HeaderMutation: m}
}

// pickMetadata is the pick as dynamic metadata, the same value as the
// header: the protocol forbids the two to differ. The codec writes its
// bytes itself (appendPickMetadata); this is the message they encode.
func pickMetadata(dest string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		DestinationNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			DestinationHeader: structpb.NewStringValue(dest),
		}}),
	}}
}

func joinPick(eps []string) string { return strings.Join(eps, ",") }

func requestHeadersResponse(c *extprocv3.CommonResponse, md *structpb.Struct) *extprocv3.ProcessingResponse {
	if c == nil {
		c = &extprocv3.CommonResponse{}
	}
	return &extprocv3.ProcessingResponse{
		Response:        &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: c}},
		DynamicMetadata: md,
	}
}

func requestBodyResponse(c *extprocv3.CommonResponse, md *structpb.Struct) *extprocv3.ProcessingResponse {
	if c == nil {
		c = &extprocv3.CommonResponse{}
	}
	return &extprocv3.ProcessingResponse{
		Response:        &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: c}},
		DynamicMetadata: md,
	}
}

func responseBodyResponse(c *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	if c == nil {
		c = &extprocv3.CommonResponse{}
	}
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: c}},
	}
}

// streamed is a chunk given back to Envoy in FULL_DUPLEX_STREAMED mode,
// where Envoy forwards only what the processor returns: the message a
// streamedBody encodes (codec.go).
func streamed(chunk []byte, end bool) *extprocv3.CommonResponse {
	return &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: chunk, EndOfStream: end}},
	}}
}

// splitChunk calls f with chunk in pieces of at most chunkLimit bytes
// (sub-slices of chunk), end set on the last piece only; an empty chunk
// is one empty piece, so an end of stream is always said.
func splitChunk(chunk []byte, end bool, f func(piece []byte, end bool) error) error {
	for len(chunk) > chunkLimit {
		if err := f(chunk[:chunkLimit], false); err != nil {
			return err
		}
		chunk = chunk[chunkLimit:]
	}
	return f(chunk, end)
}

func addHeaders(add [][2]string) *extprocv3.CommonResponse {
	c := &extprocv3.CommonResponse{}
	if len(add) == 0 {
		return c
	}
	set := make([]*corev3.HeaderValueOption, len(add))
	for i, h := range add {
		set[i] = &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: strings.ToLower(h[0]), RawValue: []byte(h[1])},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		}
	}
	c.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: set}
	return c
}

// immediate is an Answer as Envoy's local reply to the client.
func immediate(a *Answer) *extprocv3.ProcessingResponse {
	ir := &extprocv3.ImmediateResponse{
		Status: &typev3.HttpStatus{Code: typev3.StatusCode(a.Status)},
		Body:   a.Body,
	}
	if m := addHeaders(a.Header).HeaderMutation; m != nil {
		ir.Headers = m
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: ir}}
}
