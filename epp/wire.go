package epp

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// pickAnswer writes into a the pick as the answer in field (the request
// headers' or, BUFFERED, the body's). The destination header overwrites
// any the client sent (a client must not choose its own endpoint), and
// the route is recomputed since routes may match on it; the pick goes as
// dynamic metadata too, the same value: the protocol forbids the two to
// differ. add are the pick's other request headers (the prefill worker
// of a disaggregated request); a client's own PrefillerHeader is removed
// when the pick names none, since a client must not choose its prefill
// worker either.
func pickAnswer(a *headersAnswer, field protowire.Number, dest string, add [][2]string) *headersAnswer {
	*a = headersAnswer{field: field, clearRoute: true, dest: dest}
	a.set = append(a.setFirst[:0], [2]string{DestinationHeader, dest})
	prefiller := false
	for _, h := range lowerNames(add) {
		prefiller = prefiller || h[0] == PrefillerHeader
		a.set = append(a.set, h)
	}
	if !prefiller {
		a.removeFirst[0] = PrefillerHeader
		a.remove = a.removeFirst[:1]
	}
	return a
}

// lowerNames is hs with its names in lower case, as HTTP/2 and Envoy's
// header maps have them; hs itself when they are already.
func lowerNames(hs [][2]string) [][2]string {
	for i, h := range hs {
		if strings.ToLower(h[0]) != h[0] {
			out := append([][2]string(nil), hs...)
			for j := i; j < len(out); j++ {
				out[j][0] = strings.ToLower(out[j][0])
			}
			return out
		}
	}
	return hs
}

// sentOfField is the kind of answer, for kvca_picker_messages_sent_total,
// in a ProcessingResponse's field.
func sentOfField(f protowire.Number) int {
	switch f {
	case fRespRequestHeaders:
		return sentRequestHeaders
	case fRespResponseHeaders:
		return sentResponseHeaders
	case fRespRequestBody:
		return sentRequestBody
	case fRespResponseBody:
		return sentResponseBody
	}
	return sentImmediate
}

func joinPick(eps []string) string { return strings.Join(eps, ",") }

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
