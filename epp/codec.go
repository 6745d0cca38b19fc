package epp

import (
	"fmt"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// codec is the picker server's gRPC codec (the server's own, not
// registered for the process): protobuf, as gRPC's default, but without
// the copies of the bodies the default makes. Every body crosses gRPC
// twice, in from the gateway and back in the streamed body answers, and
// the default codec copied each one twice on the way in (the frames
// into a pooled buffer, then out of it into the message) and once on
// the way out, into a pooled buffer zeroed to its tier's size (1 MiB for
// a 64 KiB chunk).
//
// Here a message received is read once into a buffer of its own, and a
// body message is decoded by hand with its body aliasing that buffer (no
// pool: the chunk lives as long as the stream holds it, and the gateway
// gets it back from the same bytes); a request body chunk goes into the
// stream's buffer for the whole body when it has one (inbound). Any other message, and a body
// message with a field this decoder does not know, goes through
// proto.Unmarshal. A streamed body sent back (a streamedBody) is
// encoded as its few bytes of framing around the body itself, which
// gRPC then writes into its frames; other messages use the marshalling
// code generated with go-control-plane (SizeVT, MarshalToSizedBufferVTStrict),
// or proto.Marshal for messages without it (the health service's).
type codec struct{}

func (codec) Name() string { return "proto" }

// vtMessage is a message with go-control-plane's generated marshalling.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict(b []byte) (int, error)
}

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *streamedBody:
		return m.encode(), nil
	case vtMessage:
		b := make([]byte, m.SizeVT())
		if _, err := m.MarshalToSizedBufferVTStrict(b); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	case proto.Message:
		b, err := proto.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return nil, fmt.Errorf("epp codec: cannot marshal a %T", v)
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*inbound)
	if ok && m.intoBody(data) {
		return nil
	}
	// A buffer of the message's own: what is decoded from it may alias
	// it, since gRPC frees data when this returns.
	b := data.Materialize()
	var pm proto.Message
	switch {
	case ok:
		if decodeBody(b, &m.req) {
			return nil
		}
		pm = &m.req
	default:
		if pm, ok = v.(proto.Message); !ok {
			return fmt.Errorf("epp codec: cannot unmarshal a %T", v)
		}
	}
	return proto.Unmarshal(b, pm)
}

// inbound is a stream's next message as the codec decodes it. A request
// body chunk goes straight into body, when the stream has one with room
// for it, right after the chunks before it: the request's body is then
// contiguous, read once out of gRPC's frames, and the lifecycle takes
// it in one piece.
type inbound struct {
	req extprocv3.ProcessingRequest
	// body is the request body so far (nil: none); expect, its length to
	// be (Content-Length) while the first chunk is awaited, 0 after.
	body   *[]byte
	expect int
	placed bool // this message's chunk went into body
}

// arenaSpan bounds the request body buffer made from Content-Length to
// this many times the first chunk: the buffer is made before the bytes
// come, and a client must not make the picker hold much more memory
// than it has sent.
const arenaSpan = 8

// intoBody decodes a request body message whose body is its first
// field into m.body, copying the chunk once out of data; false, m.body
// unchanged, for any other message or when the chunk does not fit.
func (m *inbound) intoBody(data mem.BufferSlice) bool {
	m.placed = false
	if m.body == nil {
		return false
	}
	var hb [24]byte
	n := data.Len()
	head := hb[:copyAt(data, 0, hb[:min(n, len(hb))])]
	num, typ, k := protowire.ConsumeTag(head)
	if k < 0 || num != fReqRequestBody || typ != protowire.BytesType {
		return false
	}
	httpLen, k2 := protowire.ConsumeVarint(head[k:])
	if k2 < 0 {
		return false
	}
	top := k + k2
	num, typ, k3 := protowire.ConsumeTag(head[top:])
	if k3 < 0 || num != fBodyBody || typ != protowire.BytesType {
		return false
	}
	l, k4 := protowire.ConsumeVarint(head[top+k3:])
	if k4 < 0 {
		return false
	}
	off := top + k3 + k4
	httpEnd := uint64(top) + httpLen
	if uint64(off)+l > httpEnd || httpEnd > uint64(n) {
		return false
	}
	chunk := int(l)
	buf := *m.body
	if m.expect > 0 {
		// The first chunk: the buffer for the whole body, if in bounds.
		if m.expect >= chunk && m.expect <= arenaSpan*chunk {
			buf = make([]byte, 0, m.expect)
		}
		m.expect = 0
	}
	if cap(buf)-len(buf) < chunk {
		return false
	}
	dst := buf[len(buf) : len(buf)+chunk : len(buf)+chunk]
	copyAt(data, off, dst)
	rest := make([]byte, n-off-chunk)
	copyAt(data, off+chunk, rest)
	split := int(httpEnd) - off - chunk
	h := decodeHTTPBody(rest[:split])
	if h == nil || h.Body != nil {
		return false
	}
	h.Body = dst
	if !decodeFields(rest[split:], &m.req, h) {
		return false
	}
	*m.body = buf[:len(buf)+chunk]
	m.placed = true
	return true
}

// copyAt copies data from offset off into dst, as much as fits; it
// returns the bytes copied.
func copyAt(data mem.BufferSlice, off int, dst []byte) int {
	n := 0
	for _, b := range data {
		d := b.ReadOnlyData()
		if off >= len(d) {
			off -= len(d)
			continue
		}
		n += copy(dst[n:], d[off:])
		off = 0
		if n == len(dst) {
			break
		}
	}
	return n
}

// Field numbers of the messages decodeBody and streamedBody handle.
const (
	fReqRequestBody    = 4  // ProcessingRequest.request_body
	fReqResponseBody   = 5  // ProcessingRequest.response_body
	fReqObservability  = 10 // ProcessingRequest.observability_mode
	fReqProtocolConfig = 11 // ProcessingRequest.protocol_config

	fBodyBody         = 1 // HttpBody.body, StreamedBodyResponse.body
	fBodyEnd          = 2 // HttpBody.end_of_stream, StreamedBodyResponse.end_of_stream
	fBodyEndNoMessage = 3 // HttpBody.end_of_stream_without_message
	fBodyCompressed   = 4 // HttpBody.grpc_message_compressed
	fBodyDrain        = 5 // HttpBody.drain_complete

	fRespRequestBody    = 3 // ProcessingResponse.request_body
	fRespResponseBody   = 4 // ProcessingResponse.response_body
	fBodyRespResponse   = 1 // BodyResponse.response
	fCommonBodyMutation = 3 // CommonResponse.body_mutation
	fMutationStreamed   = 3 // BodyMutation.streamed_response
)

// decodeBody decodes b into m when it is a request or response body
// message with no field but the body's, observability_mode and
// protocol_config, the body aliasing b; it reports false, m untouched,
// for anything else.
func decodeBody(b []byte, m *extprocv3.ProcessingRequest) bool {
	return decodeFields(b, m, nil)
}

// decodeFields is decodeBody, or with given set the fields of a request
// body message other than its body, which is given.
func decodeFields(b []byte, m *extprocv3.ProcessingRequest, given *extprocv3.HttpBody) bool {
	var (
		body     = given
		response bool
		observe  bool
		pc       []byte
	)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case (num == fReqRequestBody || num == fReqResponseBody) && typ == protowire.BytesType && body == nil:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			if body = decodeHTTPBody(v); body == nil {
				return false
			}
			response = num == fReqResponseBody
		case num == fReqObservability && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			observe = v != 0
		case num == fReqProtocolConfig && typ == protowire.BytesType && pc == nil:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			pc = v
		default:
			return false
		}
	}
	if body == nil {
		return false
	}
	var cfg *extprocv3.ProtocolConfiguration
	if pc != nil {
		cfg = &extprocv3.ProtocolConfiguration{}
		if proto.Unmarshal(pc, cfg) != nil {
			return false
		}
	}
	m.Reset()
	m.ObservabilityMode, m.ProtocolConfig = observe, cfg
	if response {
		m.Request = &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: body}
	} else {
		m.Request = &extprocv3.ProcessingRequest_RequestBody{RequestBody: body}
	}
	return true
}

// decodeHTTPBody decodes an HttpBody, its body aliasing b; nil when b
// holds a field it does not know or is malformed.
func decodeHTTPBody(b []byte) *extprocv3.HttpBody {
	h := &extprocv3.HttpBody{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		switch {
		case num == fBodyBody && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil
			}
			b = b[n:]
			// proto3 bytes: the last occurrence wins, as proto.Unmarshal has it.
			h.Body = v[:len(v):len(v)]
		case num >= fBodyEnd && num <= fBodyDrain && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil
			}
			b = b[n:]
			switch num {
			case fBodyEnd:
				h.EndOfStream = v != 0
			case fBodyEndNoMessage:
				h.EndOfStreamWithoutMessage = v != 0
			case fBodyCompressed:
				h.GrpcMessageCompressed = v != 0
			case fBodyDrain:
				h.DrainComplete = v != 0
			}
		default:
			return nil
		}
	}
	return h
}

// streamedBody is a ProcessingResponse that streams a body chunk back to
// the gateway (FULL_DUPLEX_STREAMED): request_body or response_body, a
// CommonResponse whose only field is a BodyMutation's streamed_response.
// The codec encodes it around the chunk without copying it.
type streamedBody struct {
	response bool // the response's body, not the request's
	body     []byte
	end      bool
}

// encode is the message's wire form: the framing of the nested messages,
// the chunk itself, then end_of_stream.
func (s *streamedBody) encode() mem.BufferSlice {
	// StreamedBodyResponse: body, then end_of_stream when set.
	inner := 0
	if len(s.body) > 0 {
		inner = protowire.SizeTag(fBodyBody) + protowire.SizeBytes(len(s.body))
	}
	if s.end {
		inner += protowire.SizeTag(fBodyEnd) + 1
	}
	mutation := protowire.SizeTag(fMutationStreamed) + protowire.SizeBytes(inner)
	common := protowire.SizeTag(fCommonBodyMutation) + protowire.SizeBytes(mutation)
	bodyResp := protowire.SizeTag(fBodyRespResponse) + protowire.SizeBytes(common)
	field := protowire.Number(fRespRequestBody)
	if s.response {
		field = fRespResponseBody
	}
	head := make([]byte, 0, 32)
	head = protowire.AppendTag(head, field, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(bodyResp))
	head = protowire.AppendTag(head, fBodyRespResponse, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(common))
	head = protowire.AppendTag(head, fCommonBodyMutation, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(mutation))
	head = protowire.AppendTag(head, fMutationStreamed, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(inner))
	if len(s.body) == 0 {
		if s.end {
			head = protowire.AppendTag(head, fBodyEnd, protowire.VarintType)
			head = protowire.AppendVarint(head, 1)
		}
		return mem.BufferSlice{mem.SliceBuffer(head)}
	}
	head = protowire.AppendTag(head, fBodyBody, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(len(s.body)))
	out := mem.BufferSlice{mem.SliceBuffer(head), mem.SliceBuffer(s.body)}
	if s.end {
		tail := head[len(head):len(head)]
		tail = protowire.AppendTag(tail, fBodyEnd, protowire.VarintType)
		tail = protowire.AppendVarint(tail, 1)
		out = append(out, mem.SliceBuffer(tail))
	}
	return out
}

// message is the streamedBody as a ProcessingResponse, for tests and for
// anything that needs the generated type.
func (s *streamedBody) message() *extprocv3.ProcessingResponse {
	c := streamed(s.body, s.end)
	if s.response {
		return responseBodyResponse(c)
	}
	return requestBodyResponse(c, nil)
}
