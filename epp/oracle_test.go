package epp

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// The answers the hand encoders (codec.go) write, as protobuf's generated
// messages: the oracles the codec's tests decode against.

// pickMutation is the pick's header mutation (pickAnswer).
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

// pickMetadata is the pick as dynamic metadata.
func pickMetadata(dest string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		DestinationNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			DestinationHeader: structpb.NewStringValue(dest),
		}}),
	}}
}

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

// message is the ProcessingResponse the streamedBody's encoding stands
// for.
func (s *streamedBody) message() *extprocv3.ProcessingResponse {
	c := streamed(s.body, s.end)
	if s.response {
		return responseBodyResponse(c)
	}
	return requestBodyResponse(c, nil)
}
