package epp

import (
	"bytes"
	"unicode/utf8"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The picker's codec: protobuf, as gRPC's, but without the copies of the
// bodies. Every body crosses the picker twice, in from the gateway and
// back in the streamed body answers.
//
// A message comes on loan from the transport (h2grpc), whole. A request
// body chunk is copied once: into the stream's buffer for the whole body
// when it has one (inbound), else on its own, since it is held until the
// pick; a response body is decoded where it lies, since nothing keeps it
// past its handling. A body or headers message is decoded by hand (the
// headers and the metadata's two values copied into the stream's own
// fields), any other message, or one with a field this decoder does not
// know, by proto.Unmarshal, which copies what it keeps.
//
// On the way out, a streamed body answer is its few bytes of framing
// around the chunk itself (streamedBody), and an answer that sets headers
// (the pick's, the response headers') is written by hand (headersAnswer);
// other messages go through proto.Marshal.

// decode decodes b, a message the transport lends, into m.
func (m *inbound) decode(b []byte) error {
	m.byHand = false
	if m.intoBody(b) {
		return nil
	}
	if m.byHand = m.decodeFields(b, nil); m.byHand {
		if rb := m.req.GetRequestBody(); rb != nil {
			// The chunk aliases the loan and is held until the pick.
			rb.Body = bytes.Clone(rb.Body)
		}
		return nil
	}
	return proto.Unmarshal(b, &m.req)
}

// handFields are what the hand decoder reads into a stream's own types
// rather than protobuf's: a headers message's fields, the subset hint
// and the endpoint served from its metadata.
type handFields struct {
	headers   envoyHeaders
	subset    []string
	hasSubset bool
	served    string
}

// headers are a headers message's fields.
func (m *inbound) headers() envoyHeaders {
	if m.byHand {
		return m.hand.headers
	}
	var h *extprocv3.HttpHeaders
	if r := m.req.GetRequestHeaders(); r != nil {
		h = r
	} else {
		h = m.req.GetResponseHeaders()
	}
	return headersOf(h.GetHeaders())
}

// subsetHint is the message's subset hint (metadata.go).
func (m *inbound) subsetHint() ([]string, bool) {
	if m.byHand {
		return m.hand.subset, m.hand.hasSubset
	}
	return subsetHint(m.req.GetMetadataContext())
}

// served is the endpoint that served the response, from the message's
// metadata ("" none).
func (m *inbound) served() string {
	if m.byHand {
		return m.hand.served
	}
	return servedEndpoint(m.req.GetMetadataContext())
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
	// byHand: the message was decoded by hand, its headers and metadata
	// into hand, not into req.
	byHand bool
	hand   handFields
	// pool gives the buffer for the whole body (nil: a new one); pooled
	// is the pool's box holding it, to go back at the stream's end.
	pool   *bodies
	pooled *[]byte
	// arena holds the headers decoded by hand, from arenas (nil: a new
	// one), to go back at the stream's end (headers.go).
	arenas *headerArenas
	arena  *headerArena
	// scratch holds the parts of a message decoded by hand that are
	// protobuf's types: the message after it replaces them.
	scratch decoded
}

// decoded are the protobuf parts of one message decoded by hand, reused
// from message to message of a stream: nothing keeps them past their
// message's handling (the body chunks held are the bytes, not these).
type decoded struct {
	headers extprocv3.HttpHeaders
	body    extprocv3.HttpBody
	config  extprocv3.ProtocolConfiguration
	reqH    extprocv3.ProcessingRequest_RequestHeaders
	respH   extprocv3.ProcessingRequest_ResponseHeaders
	reqB    extprocv3.ProcessingRequest_RequestBody
	respB   extprocv3.ProcessingRequest_ResponseBody
}

// arenaSpan bounds the request body buffer made from Content-Length to
// this many times the first chunk: the buffer is made before the bytes
// come, and a client must not make the picker hold much more memory
// than it has sent. Sixteen: Envoy's chunks of 64 KiB then cover bodies
// of up to 1 MiB.
const arenaSpan = 16

// intoBody decodes a request body message whose body is its first
// field into m.body, copying the chunk once out of data; false, m.body
// unchanged, for any other message or when the chunk does not fit.
func (m *inbound) intoBody(data []byte) bool {
	m.placed = false
	if m.body == nil {
		return false
	}
	n := len(data)
	head := data[:min(n, 24)]
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
	// Lengths as sent, checked before any sum that could wrap.
	if httpLen > uint64(n) || l > httpLen || uint64(off)+l > uint64(top)+httpLen || uint64(top)+httpLen > uint64(n) {
		return false
	}
	httpEnd := uint64(top) + httpLen
	chunk := int(l)
	buf := *m.body
	if m.expect > 0 {
		// The first chunk: the buffer for the whole body, if in bounds.
		if m.expect >= chunk && m.expect <= arenaSpan*chunk {
			if b, box := m.pool.get(m.expect); box != nil {
				// The length said, not the class's: what passes it goes
				// chunk by chunk, as without a buffer.
				m.pooled, buf = box, b[:0:m.expect]
			} else {
				buf = b
			}
		}
		m.expect = 0
	}
	if cap(buf)-len(buf) < chunk {
		return false
	}
	dst := buf[len(buf) : len(buf)+chunk : len(buf)+chunk]
	copy(dst, data[off:])
	// The other fields are varints and metadata, which decoding copies:
	// they may lie in the loan.
	rest := data[off+chunk:]
	split := int(httpEnd) - off - chunk
	h := m.scratch.decodeBody(rest[:split])
	if h == nil || h.Body != nil {
		return false
	}
	h.Body = dst
	if m.byHand = m.decodeFields(rest[split:], h); !m.byHand {
		return false
	}
	*m.body = buf[:len(buf)+chunk]
	m.placed = true
	return true
}

// Field numbers of the messages decodeBody and streamedBody handle.
const (
	fReqRequestBody     = 4  // ProcessingRequest.request_body
	fReqResponseBody    = 5  // ProcessingRequest.response_body
	fReqRequestHeaders  = 2  // ProcessingRequest.request_headers
	fReqResponseHeaders = 3  // ProcessingRequest.response_headers
	fReqMetadata        = 8  // ProcessingRequest.metadata_context
	fReqObservability   = 10 // ProcessingRequest.observability_mode
	fReqProtocolConfig  = 11 // ProcessingRequest.protocol_config

	fConfigRequestMode  = 1 // ProtocolConfiguration.request_body_mode
	fConfigResponseMode = 2 // ProtocolConfiguration.response_body_mode
	fConfigNoWait       = 3 // ProtocolConfiguration.send_body_without_waiting_for_header_response

	fHeadersHeaders = 1 // HttpHeaders.headers
	fHeadersEnd     = 3 // HttpHeaders.end_of_stream
	fMapHeaders     = 1 // HeaderMap.headers
	fValueKey       = 1 // HeaderValue.key
	fValueValue     = 2 // HeaderValue.value
	fValueRaw       = 3 // HeaderValue.raw_value

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

// field is one protobuf field as the hand decoders read it: a varint's
// value in u, or a length-delimited value in v, aliasing the message
// (its capacity cut at its end: an append never writes into what follows).
type field struct {
	num protowire.Number
	typ protowire.Type
	u   uint64
	v   []byte
}

// nextField consumes the field at the start of *b; false when it is
// malformed or of a wire type the decoders never take (fixed32, fixed64,
// groups: protobuf's decoder takes the message then).
func nextField(b *[]byte) (field, bool) {
	num, typ, n := protowire.ConsumeTag(*b)
	if n < 0 {
		return field{}, false
	}
	f := field{num: num, typ: typ}
	rest := (*b)[n:]
	switch typ {
	case protowire.VarintType:
		f.u, n = protowire.ConsumeVarint(rest)
	case protowire.BytesType:
		f.v, n = protowire.ConsumeBytes(rest)
		f.v = f.v[:len(f.v):len(f.v)]
	default:
		return field{}, false
	}
	if n < 0 {
		return field{}, false
	}
	*b = rest[n:]
	return f, true
}

// decodeFields decodes b into in.req and in.hand when it is a body or
// headers message with no field but the body's or the headers',
// metadata_context, observability_mode and protocol_config: a body
// aliasing b, the headers' fields (into the arena) and the metadata's
// subset hint and endpoint served into hand, copied; it reports false,
// req and hand untouched, for anything else (proto.Unmarshal's then).
// With given set, b is the fields of a request body message other than
// its body, which is given.
func (in *inbound) decodeFields(b []byte, given *extprocv3.HttpBody) bool {
	var (
		body      = given
		kind      = protowire.Number(fReqRequestBody)
		headers   *extprocv3.HttpHeaders
		fields    envoyHeaders
		observe   bool
		pc, mdRaw []byte
	)
	for len(b) > 0 {
		f, ok := nextField(&b)
		if !ok {
			return false
		}
		if f.typ == protowire.VarintType && f.num == fReqObservability {
			observe = f.u != 0
			continue
		}
		if f.typ != protowire.BytesType {
			return false
		}
		num, v := f.num, f.v
		switch {
		case (num == fReqRequestBody || num == fReqResponseBody) && body == nil && headers == nil:
			if body = in.scratch.decodeBody(v); body == nil {
				return false
			}
			kind = num
		case (num == fReqRequestHeaders || num == fReqResponseHeaders) && body == nil && headers == nil:
			if headers, fields = in.decodeHTTPHeaders(v); headers == nil {
				return false
			}
			kind = num
		case num == fReqProtocolConfig && pc == nil:
			pc = v
		case num == fReqMetadata && mdRaw == nil:
			mdRaw = v
		default:
			return false
		}
	}
	if body == nil && headers == nil {
		return false
	}
	var cfg *extprocv3.ProtocolConfiguration
	if pc != nil {
		if cfg = in.scratch.decodeConfig(pc); cfg == nil {
			return false
		}
	}
	var md metadataFields
	if mdRaw != nil && !md.read(mdRaw) {
		return false
	}
	m, sc := &in.req, &in.scratch
	m.Reset()
	m.ObservabilityMode, m.ProtocolConfig = observe, cfg
	in.hand = handFields{headers: fields, subset: md.subset, hasSubset: md.hasSubset, served: md.served}
	switch kind {
	case fReqRequestBody:
		sc.reqB.RequestBody = body
		m.Request = &sc.reqB
	case fReqResponseBody:
		sc.respB.ResponseBody = body
		m.Request = &sc.respB
	case fReqRequestHeaders:
		sc.reqH.RequestHeaders = headers
		m.Request = &sc.reqH
	case fReqResponseHeaders:
		sc.respH.ResponseHeaders = headers
		m.Request = &sc.respH
	}
	return true
}

// decodeConfig decodes a ProtocolConfiguration, three varints (Envoy
// sends it with every stream's first message); nil for anything else,
// protobuf's then.
func (d *decoded) decodeConfig(b []byte) *extprocv3.ProtocolConfiguration {
	pc := &d.config
	pc.Reset()
	for len(b) > 0 {
		f, ok := nextField(&b)
		if !ok || f.typ != protowire.VarintType {
			return nil
		}
		switch f.num {
		case fConfigRequestMode:
			pc.RequestBodyMode = BodyMode(int32(f.u))
		case fConfigResponseMode:
			pc.ResponseBodyMode = BodyMode(int32(f.u))
		case fConfigNoWait:
			pc.SendBodyWithoutWaitingForHeaderResponse = f.u != 0
		default:
			return nil
		}
	}
	return pc
}

// decodeHTTPHeaders decodes an HttpHeaders: its end of stream, and its
// header map as fields, names and values copied into one buffer (the
// lifecycle may keep them past the message); nil when b holds a field it
// does not know (the attributes), a name or value that is not UTF-8
// (protobuf refuses those), or is malformed.
func (in *inbound) decodeHTTPHeaders(b []byte) (*extprocv3.HttpHeaders, envoyHeaders) {
	h := &in.scratch.headers
	h.Reset()
	var fields envoyHeaders
	seen := false
	for len(b) > 0 {
		f, ok := nextField(&b)
		switch {
		case !ok:
			return nil, nil
		case f.num == fHeadersHeaders && f.typ == protowire.BytesType && !seen:
			seen = true
			if in.arena == nil {
				in.arena = in.arenas.get()
			}
			if fields, ok = in.arena.decode(f.v); !ok {
				return nil, nil
			}
		case f.num == fHeadersEnd && f.typ == protowire.VarintType:
			h.EndOfStream = f.u != 0
		default:
			return nil, nil
		}
	}
	return h, fields
}

// decode decodes a HeaderMap into fields after those the arena holds,
// as headersOf reads one: a value in raw_value, else in value; names and
// values copied into the arena's buffer.
func (a *headerArena) decode(b []byte) (envoyHeaders, bool) {
	count, size := 0, 0
	ok := eachHeader(b, func(key, value, raw []byte) {
		count++
		size += len(key) + len(headerValue(value, raw))
	})
	if !ok || count == 0 {
		return nil, ok
	}
	// A buffer that lacks room is replaced, not grown: the fields decoded
	// before keep pointing into the old one.
	if cap(a.buf)-len(a.buf) < size {
		a.buf = make([]byte, 0, max(size, 2*cap(a.buf), 512))
	}
	if cap(a.fields)-len(a.fields) < count {
		a.fields = make(envoyHeaders, 0, max(count, 2*cap(a.fields), 16))
	}
	start := len(a.fields)
	eachHeader(b, func(key, value, raw []byte) {
		at := len(a.buf)
		a.buf = append(a.buf, key...)
		mid := len(a.buf)
		a.buf = append(a.buf, headerValue(value, raw)...)
		a.fields = append(a.fields, headerField{name: a.buf[at:mid:mid], value: a.buf[mid:len(a.buf):len(a.buf)]})
	})
	return a.fields[start:len(a.fields):len(a.fields)], true
}

func headerValue(value, raw []byte) []byte {
	if len(raw) > 0 {
		return raw
	}
	return value
}

// eachHeader calls f with the fields of each HeaderValue of a HeaderMap
// in b; false when b is not a HeaderMap of HeaderValues this decoder
// knows, f then maybe called for some.
func eachHeader(b []byte, f func(key, value, raw []byte)) bool {
	for len(b) > 0 {
		hv, ok := nextField(&b)
		if !ok || hv.num != fMapHeaders || hv.typ != protowire.BytesType {
			return false
		}
		var key, value, raw []byte
		for v := hv.v; len(v) > 0; {
			x, ok := nextField(&v)
			if !ok || x.typ != protowire.BytesType {
				return false
			}
			// proto3 scalars: the last occurrence wins, and protobuf
			// refuses a string that is not UTF-8 in any of them.
			switch x.num {
			case fValueKey:
				key = x.v
			case fValueValue:
				value = x.v
			case fValueRaw:
				raw = x.v
			default:
				return false
			}
			if x.num != fValueRaw && !utf8.Valid(x.v) {
				return false
			}
		}
		f(key, value, raw)
	}
	return true
}

// decodeBody decodes an HttpBody, its body aliasing b; nil when b holds
// a field it does not know or is malformed.
func (d *decoded) decodeBody(b []byte) *extprocv3.HttpBody {
	h := &d.body
	h.Reset()
	for len(b) > 0 {
		f, ok := nextField(&b)
		switch {
		case !ok:
			return nil
		case f.num == fBodyBody && f.typ == protowire.BytesType:
			// proto3 bytes: the last occurrence wins, as proto.Unmarshal has it.
			h.Body = f.v
		case f.num >= fBodyEnd && f.num <= fBodyDrain && f.typ == protowire.VarintType:
			v := f.u
			switch f.num {
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
// It is encoded around the chunk without copying it.
type streamedBody struct {
	response bool // the response's body, not the request's
	body     []byte
	end      bool
}

// frame is the message's wire form but the chunk: head goes before it,
// tail after, both in scratch (32 bytes are enough).
func (s *streamedBody) frame(scratch []byte) (head, tail []byte) {
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
	head = protowire.AppendTag(scratch[:0], field, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(bodyResp))
	head = protowire.AppendTag(head, fBodyRespResponse, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(common))
	head = protowire.AppendTag(head, fCommonBodyMutation, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(mutation))
	head = protowire.AppendTag(head, fMutationStreamed, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(inner))
	if len(s.body) > 0 {
		head = protowire.AppendTag(head, fBodyBody, protowire.BytesType)
		head = protowire.AppendVarint(head, uint64(len(s.body)))
	}
	tail = head[len(head):len(head)]
	if s.end {
		tail = protowire.AppendTag(tail, fBodyEnd, protowire.VarintType)
		tail = protowire.AppendVarint(tail, 1)
	}
	return head, tail
}

// headersAnswer is a ProcessingResponse whose answer, in field of the
// ProcessingResponse (request_headers, response_headers or request_body:
// a HeadersResponse and a BodyResponse are the same on the wire, their
// CommonResponse in field 1), sets headers and removes some, and may
// clear the route cache; with dest set, the pick goes with it as dynamic
// metadata ({DestinationNamespace: {DestinationHeader: dest}}). The
// generated marshalling went through protobuf's reflection and a dozen
// objects per answer; these are its few bytes written out.
type headersAnswer struct {
	field      protowire.Number
	set        [][2]string // names in lower case, values
	remove     []string
	clearRoute bool
	dest       string
	// The first fields of set and remove, without an allocation: a is
	// not copied while they are in use.
	setFirst    [2][2]string
	removeFirst [1]string
}

// Field numbers of the answers headersAnswer writes.
const (
	fRespRequestHeaders  = 1 // ProcessingResponse.request_headers
	fRespResponseHeaders = 2 // ProcessingResponse.response_headers
	fRespDynamicMetadata = 8 // ProcessingResponse.dynamic_metadata

	fCommonHeaderMutation = 2 // CommonResponse.header_mutation
	fCommonClearRoute     = 5 // CommonResponse.clear_route_cache
	fMutationSet          = 1 // HeaderMutation.set_headers
	fMutationRemove       = 2 // HeaderMutation.remove_headers
	fOptionHeader         = 1 // HeaderValueOption.header
	fOptionAppendAction   = 3 // HeaderValueOption.append_action

	fStructFields = 1 // Struct.fields, a map: entries of key 1, value 2
	fValueString  = 3 // Value.string_value
	fValueStruct  = 5 // Value.struct_value

	overwriteOrAdd = 2 // HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
)

// headerValueSize is the size of a HeaderValue of name and raw value.
func headerValueSize(name, value string) int {
	return protowire.SizeTag(fValueKey) + protowire.SizeBytes(len(name)) + protowire.SizeTag(fValueRaw) + protowire.SizeBytes(len(value))
}

// optionSize is the size of a HeaderValueOption setting name to value.
func optionSize(name, value string) int {
	return protowire.SizeTag(fOptionHeader) + protowire.SizeBytes(headerValueSize(name, value)) + protowire.SizeTag(fOptionAppendAction) + 1
}

func (a *headersAnswer) appendTo(b []byte) []byte {
	tb := protowire.BytesType
	mutation := 0
	for _, h := range a.set {
		mutation += protowire.SizeTag(fMutationSet) + protowire.SizeBytes(optionSize(h[0], h[1]))
	}
	for _, r := range a.remove {
		mutation += protowire.SizeTag(fMutationRemove) + protowire.SizeBytes(len(r))
	}
	common := 0
	if len(a.set)+len(a.remove) > 0 {
		common += protowire.SizeTag(fCommonHeaderMutation) + protowire.SizeBytes(mutation)
	}
	if a.clearRoute {
		common += protowire.SizeTag(fCommonClearRoute) + 1
	}
	response := protowire.SizeTag(fBodyRespResponse) + protowire.SizeBytes(common)

	b = protowire.AppendTag(b, a.field, tb)
	b = protowire.AppendVarint(b, uint64(response))
	b = protowire.AppendTag(b, fBodyRespResponse, tb)
	b = protowire.AppendVarint(b, uint64(common))
	if len(a.set)+len(a.remove) > 0 {
		b = protowire.AppendTag(b, fCommonHeaderMutation, tb)
		b = protowire.AppendVarint(b, uint64(mutation))
		for _, h := range a.set {
			b = protowire.AppendTag(b, fMutationSet, tb)
			b = protowire.AppendVarint(b, uint64(optionSize(h[0], h[1])))
			b = protowire.AppendTag(b, fOptionHeader, tb)
			b = protowire.AppendVarint(b, uint64(headerValueSize(h[0], h[1])))
			b = protowire.AppendTag(b, fValueKey, tb)
			b = protowire.AppendString(b, h[0])
			b = protowire.AppendTag(b, fValueRaw, tb)
			b = protowire.AppendString(b, h[1])
			b = protowire.AppendTag(b, fOptionAppendAction, protowire.VarintType)
			b = protowire.AppendVarint(b, overwriteOrAdd)
		}
		for _, r := range a.remove {
			b = protowire.AppendTag(b, fMutationRemove, tb)
			b = protowire.AppendString(b, r)
		}
	}
	if a.clearRoute {
		b = protowire.AppendTag(b, fCommonClearRoute, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	if a.dest != "" {
		b = appendPickMetadata(b, a.dest)
	}
	return b
}

// appendPickMetadata appends the pick as a ProcessingResponse's
// dynamic_metadata field: {DestinationNamespace: {DestinationHeader: dest}}.
func appendPickMetadata(b []byte, dest string) []byte {
	tb := protowire.BytesType
	value := protowire.SizeTag(fValueString) + protowire.SizeBytes(len(dest))
	entry := protowire.SizeTag(1) + protowire.SizeBytes(len(DestinationHeader)) + protowire.SizeTag(2) + protowire.SizeBytes(value)
	inner := protowire.SizeTag(fStructFields) + protowire.SizeBytes(entry)
	outerValue := protowire.SizeTag(fValueStruct) + protowire.SizeBytes(inner)
	outerEntry := protowire.SizeTag(1) + protowire.SizeBytes(len(DestinationNamespace)) + protowire.SizeTag(2) + protowire.SizeBytes(outerValue)
	outer := protowire.SizeTag(fStructFields) + protowire.SizeBytes(outerEntry)

	b = protowire.AppendTag(b, fRespDynamicMetadata, tb)
	b = protowire.AppendVarint(b, uint64(outer))
	b = protowire.AppendTag(b, fStructFields, tb)
	b = protowire.AppendVarint(b, uint64(outerEntry))
	b = protowire.AppendTag(b, 1, tb)
	b = protowire.AppendString(b, DestinationNamespace)
	b = protowire.AppendTag(b, 2, tb)
	b = protowire.AppendVarint(b, uint64(outerValue))
	b = protowire.AppendTag(b, fValueStruct, tb)
	b = protowire.AppendVarint(b, uint64(inner))
	b = protowire.AppendTag(b, fStructFields, tb)
	b = protowire.AppendVarint(b, uint64(entry))
	b = protowire.AppendTag(b, 1, tb)
	b = protowire.AppendString(b, DestinationHeader)
	b = protowire.AppendTag(b, 2, tb)
	b = protowire.AppendVarint(b, uint64(value))
	b = protowire.AppendTag(b, fValueString, tb)
	return protowire.AppendString(b, dest)
}
