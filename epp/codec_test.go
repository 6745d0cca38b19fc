package epp

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

func lbMetadataOf(ns, key string, v *structpb.Value) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{ns: {Fields: map[string]*structpb.Value{key: v}}}}
}

func chunk(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

// TestCodecStreamedBody: the streamed body answers the codec writes
// around the chunk are the bytes protobuf decodes as the
// ProcessingResponse they stand for.
func TestCodecStreamedBody(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 16383, 16384, chunkLimit, 200000} {
		for _, end := range []bool{false, true} {
			for _, response := range []bool{false, true} {
				s := &streamedBody{response: response, body: chunk(n), end: end}
				var scratch [32]byte
				head, tail := s.frame(scratch[:])
				got := &extprocv3.ProcessingResponse{}
				if err := proto.Unmarshal(slices.Concat(head, s.body, tail), got); err != nil {
					t.Fatalf("%d bytes, end %v, response %v: %v", n, end, response, err)
				}
				if want := s.message(); !proto.Equal(got, want) {
					t.Errorf("%d bytes, end %v, response %v: decodes as %v, want %v", n, end, response, got, want)
				}
			}
		}
	}
}

// TestCodecDecodesBodies: a body message decodes as protobuf decodes it,
// its body aliasing the message's buffer; a message with any other field
// goes through protobuf.
func TestCodecDecodesBodies(t *testing.T) {
	full := filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	msgs := map[string]*extprocv3.ProcessingRequest{
		"request body":  {Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: chunk(70000), EndOfStream: true}}},
		"response body": {Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: chunk(300)}}},
		"empty end":     {Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{EndOfStream: true}}},
		"flags": {ObservabilityMode: true, Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
			Body: chunk(10), EndOfStreamWithoutMessage: true, GrpcMessageCompressed: true, DrainComplete: true}}},
		"headers with protocol config": {
			ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_BUFFERED, ResponseBodyMode: full},
			Request:        &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{}}},
		"protocol config": {
			ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: full, ResponseBodyMode: full, SendBodyWithoutWaitingForHeaderResponse: true},
			Request:        &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: chunk(5)}}},
		"metadata": {
			MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"a": {}}},
			Request:         &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: chunk(5)}}},
		"headers": {Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				{Key: ":path", RawValue: []byte("/x")}, {Key: "x-old", Value: "v"}, {Key: "x-empty"}, {Key: ":method", RawValue: []byte("POST")}}}}}},
		"response headers": {
			MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.lb": {Fields: map[string]*structpb.Value{"k": structpb.NewStringValue("v")}}}},
			Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{EndOfStream: true,
				Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte("200")}}}}}},
		"no headers": {Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{EndOfStream: true}}},
		"attributes": {
			Attributes: map[string]*structpb.Struct{"a": {}},
			Request:    &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{}}},
		"header attributes": {Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Attributes: map[string]*structpb.Struct{"a": {}}}}},
		"trailers": {Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}},
		"subset as a string": {
			MetadataContext: lbMetadataOf(SubsetNamespace, SubsetKey, structpb.NewStringValue("10.0.0.1:8000, 10.0.0.2:8000")),
			Request:         &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{}}},
		"subset as a list": {
			MetadataContext: lbMetadataOf(SubsetNamespace, SubsetKey, structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{
				structpb.NewStringValue("10.0.0.1:8000"), structpb.NewNumberValue(3), structpb.NewStringValue("10.0.0.3")}})),
			Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{}}},
		"empty subset": {
			MetadataContext: lbMetadataOf(SubsetNamespace, SubsetKey, structpb.NewListValue(&structpb.ListValue{})),
			Request:         &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{}}},
		"served and more": {
			MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
				DestinationNamespace: {Fields: map[string]*structpb.Value{ServedKey: structpb.NewStringValue("10.0.0.2:8000"),
					"nested": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"b": structpb.NewBoolValue(true), "n": structpb.NewNullValue()}})}},
				"other": {Fields: map[string]*structpb.Value{SubsetKey: structpb.NewStringValue("not this")}}}},
			Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{}}},
		"served not a string": {
			MetadataContext: lbMetadataOf(DestinationNamespace, ServedKey, structpb.NewNumberValue(1)),
			Request:         &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{}}},
		"typed metadata": {
			MetadataContext: &corev3.Metadata{TypedFilterMetadata: map[string]*anypb.Any{"a": {TypeUrl: "x"}}},
			Request:         &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{}}},
	}
	for name, want := range msgs {
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		m := &inbound{}
		if err := m.decode(b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkAsProtobuf(t, name, m, b)
		wantFast := want.GetAttributes() == nil && want.GetRequestHeaders().GetAttributes() == nil && want.GetRequestTrailers() == nil &&
			!strings.HasPrefix(name, "typed")
		if m.byHand != wantFast {
			t.Errorf("%s: decoded by hand %v, want %v", name, m.byHand, wantFast)
		}
	}
	b, _ := proto.Marshal(msgs["request body"])
	hm := &inbound{}
	if !hm.decodeFields(b, nil) {
		t.Fatal("a request body message was not decoded by hand")
	}
	body := hm.req.GetRequestBody().GetBody()
	if i := bytes.Index(b, body); i < 0 || &b[i] != &body[0] {
		t.Error("the body was copied, not aliased")
	}
	// A request chunk outlives the loan of its message, whatever the order
	// of the message's fields (the metadata first here, as any protobuf
	// writer may put it): the transport reuses the buffer.
	md, _ := proto.Marshal(&extprocv3.ProcessingRequest{MetadataContext: lbMetadataOf("a", "b", structpb.NewStringValue("c"))})
	rb, _ := proto.Marshal(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte("keep me")}}})
	loan := append(md, rb...)
	in := &inbound{}
	if err := in.decode(loan); err != nil || !in.byHand {
		t.Fatalf("metadata first: %v, by hand %v", err, in.byHand)
	}
	clear(loan)
	if got := in.req.GetRequestBody().GetBody(); string(got) != "keep me" {
		t.Fatalf("the held chunk read %q once its message's buffer was reused", got)
	}
	// A name that is not UTF-8 is refused, as protobuf refuses it.
	bad := []byte{0x12, 0x08, 0x0a, 0x06, 0x0a, 0x04, 0x0a, 0x02, 0xff, 0xfe}
	if err := (&inbound{}).decode(bad); err == nil {
		t.Error("a header name that is not UTF-8 was accepted")
	}
	// Cut anywhere, the message may be malformed: the hand decoder
	// declines it or decodes what is there, and never panics.
	for i := range 40 {
		(&inbound{}).decodeFields(b[:i], nil)
	}
}

// checkAsProtobuf checks m, b decoded, against protobuf's decoding of b:
// the same message, and the same headers, subset hint and endpoint served
// as the picker reads them from protobuf's types. A message decoded by
// hand holds its headers and metadata in m.hand, not in m.req.
func checkAsProtobuf(t *testing.T, name string, m *inbound, b []byte) {
	t.Helper()
	want := &extprocv3.ProcessingRequest{}
	if err := proto.Unmarshal(b, want); err != nil {
		t.Fatalf("%s: decoded, refused by protobuf: %v", name, err)
	}
	ref := &inbound{}
	if err := proto.Unmarshal(b, &ref.req); err != nil {
		t.Fatal(err)
	}
	if got, wantHs := m.headers(), ref.headers(); len(got) != len(wantHs) {
		t.Fatalf("%s: %d headers, want %d", name, len(got), len(wantHs))
	} else {
		for i := range got {
			if !bytes.Equal(got[i].name, wantHs[i].name) || !bytes.Equal(got[i].value, wantHs[i].value) {
				t.Errorf("%s: header %d is %q: %q, want %q: %q", name, i, got[i].name, got[i].value, wantHs[i].name, wantHs[i].value)
			}
		}
	}
	gotSub, gotHas := m.subsetHint()
	wantSub, wantHas := ref.subsetHint()
	if gotHas != wantHas || !slices.Equal(gotSub, wantSub) {
		t.Errorf("%s: subset hint %q %v, want %q %v", name, gotSub, gotHas, wantSub, wantHas)
	}
	if got, w := m.served(), ref.served(); got != w {
		t.Errorf("%s: served %q, want %q", name, got, w)
	}
	if m.byHand {
		want.MetadataContext = nil
		if h := want.GetRequestHeaders(); h != nil {
			h.Headers = nil
		}
		if h := want.GetResponseHeaders(); h != nil {
			h.Headers = nil
		}
	}
	if !proto.Equal(&m.req, want) {
		t.Errorf("%s: decoded as %v, want %v", name, &m.req, want)
	}
}

// TestCodecHeadersAnswer: the answers that set headers, written by hand,
// decode as the ProcessingResponses they stand for: the pick's, with its
// metadata, in the request headers' answer and the body's; the response
// headers' with headers added or none; the empty acknowledgements.
func TestCodecHeadersAnswer(t *testing.T) {
	for _, dest := range []string{"10.0.0.1:8000", "10.0.0.1:8000,10.0.0.2:8000", strings.Repeat("x", 300)} {
		for _, add := range [][][2]string{nil, {{"X-Prefiller-Host-Port", "10.0.0.9:8000"}}, {{"x-other", "v"}}} {
			for _, c := range []struct {
				a    *headersAnswer
				want *extprocv3.ProcessingResponse
			}{
				{pickAnswer(&headersAnswer{}, fRespRequestHeaders, dest, add), requestHeadersResponse(pickMutation(dest, add), pickMetadata(dest))},
				{pickAnswer(&headersAnswer{}, fRespRequestBody, dest, add), requestBodyResponse(pickMutation(dest, add), pickMetadata(dest))},
			} {
				checkAnswer(t, c.a, c.want)
			}
		}
	}
	added := [][2]string{{"X-Kvca-Session", strings.Repeat("s", 200)}, {"x-kvca-backend", "b1"}}
	checkAnswer(t, &headersAnswer{field: fRespResponseHeaders, set: lowerNames(added)},
		&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{Response: addHeaders(added)}}})
	checkAnswer(t, &headersAnswer{field: fRespResponseHeaders},
		&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}}}})
	checkAnswer(t, &headersAnswer{field: fRespRequestHeaders}, requestHeadersResponse(nil, nil))
	checkAnswer(t, &headersAnswer{field: fRespRequestBody}, requestBodyResponse(nil, nil))
	checkAnswer(t, &headersAnswer{field: fRespResponseBody}, responseBodyResponse(nil))
}

func checkAnswer(t *testing.T, a *headersAnswer, want *extprocv3.ProcessingResponse) {
	t.Helper()
	got := &extprocv3.ProcessingResponse{}
	if err := proto.Unmarshal(a.appendTo(nil), got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("decodes as %v, want %v", got, want)
	}
}

// TestCodecBodyBufferRefusesBadLengths: lengths beyond the message, or
// large enough to wrap a sum, leave the body buffer alone.
func TestCodecBodyBufferRefusesBadLengths(t *testing.T) {
	huge := protowire.AppendVarint(nil, 1<<64-5)
	for name, msg := range map[string][]byte{
		"body beyond":     {0x22, 0x05, 0x0a, 0x10, 'a', 'b', 'c'},
		"message beyond":  {0x22, 0x40, 0x0a, 0x02, 'a', 'b'},
		"wrapping body":   append(append([]byte{0x22, 0x0c, 0x0a}, huge...), 'a'),
		"wrapping header": append(append([]byte{0x22}, huge...), 0x0a, 0x01, 'a'),
	} {
		var body []byte
		m := &inbound{body: &body, expect: 100}
		if m.intoBody(msg) || m.placed || body != nil {
			t.Errorf("%s: put %q into the body buffer", name, body)
		}
	}
}

// FuzzDecodeBody: whatever bytes arrive, the hand decoder either declines
// them (protobuf's decoder then has them) or decodes exactly what
// protobuf decodes from them, and never panics.
func FuzzDecodeBody(f *testing.F) {
	full := filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	for _, m := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: chunk(40), EndOfStream: true}}},
		{ObservabilityMode: true, ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: full},
			Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: chunk(5), DrainComplete: true}}},
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{EndOfStream: true,
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/x")}, {Key: "a", Value: "b"}}}}}},
		{MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"a": {}}},
			Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{}}},
		{MetadataContext: lbMetadataOf(SubsetNamespace, SubsetKey, structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{
			structpb.NewStringValue("10.0.0.1:8000"), structpb.NewStringValue("10.0.0.2:8000,10.0.0.3:8000")}})),
			Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
				Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/x")}}}}}},
		{MetadataContext: lbMetadataOf(DestinationNamespace, ServedKey, structpb.NewStringValue("10.0.0.1:8000")),
			Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{EndOfStream: true}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// A stream decodes its messages into one inbound: a message decoded
	// after another must read as if alone.
	before, err := proto.Marshal(&extprocv3.ProcessingRequest{ObservabilityMode: true,
		ProtocolConfig:  &extprocv3.ProtocolConfiguration{RequestBodyMode: full, ResponseBodyMode: full, SendBodyWithoutWaitingForHeaderResponse: true},
		MetadataContext: lbMetadataOf(DestinationNamespace, ServedKey, structpb.NewStringValue("10.0.0.9:8000")),
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{EndOfStream: true,
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/before")}, {Key: "x-b", Value: "1"}}}}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m := &inbound{}
		if m.byHand = m.decodeFields(b, nil); !m.byHand {
			return
		}
		checkAsProtobuf(t, "fuzzed", m, b)
		again := &inbound{}
		if !again.decodeFields(before, nil) {
			t.Fatal("the message before was not decoded by hand")
		}
		if again.byHand = again.decodeFields(b, nil); !again.byHand {
			t.Fatal("decoded by hand alone, not after another message")
		}
		checkAsProtobuf(t, "fuzzed after another message", again, b)
	})
}
