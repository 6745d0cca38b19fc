// Package pd writes the bodies of a disaggregated request's legs, as the
// engines' own protocols want them (docs/disaggregation.md):
//
//   - vLLM's NixlConnector: the prefill leg is the client's body with
//     kv_transfer_params asking for a remote decode, no stream, and its
//     output capped at one token; the prefill worker's answer carries
//     kv_transfer_params, which the decode leg adds to the client's own
//     body;
//   - SGLang's disaggregation: both legs carry the client's body with
//     bootstrap_host, bootstrap_port and bootstrap_room, the prefill
//     worker's bootstrap server and a room pairing the two legs.
//
// The client's body is never changed in place: every function appends a
// new body to dst. Bodies are rewritten as JSON (names and values kept as
// the client wrote them, whitespace between members dropped;
// the members set come last), and a member the client repeated is replaced
// wherever it appears, so no engine reading the last duplicate sees the
// client's value.
package pd

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/valyala/fastjson"
)

// API is the kind of request a body is, as its output caps differ.
type API uint8

const (
	Chat        API = iota // /v1/chat/completions
	Completions            // /v1/completions
	Responses              // /v1/responses
)

// Fields only kvca may set in a disaggregated fleet: a client naming a
// transfer or a bootstrap server could make a decode worker read another
// request's KV cache, or connect where the client says.
var reserved = [...]string{"kv_transfer_params", "bootstrap_host", "bootstrap_port", "bootstrap_room"}

// Reserved returns the first top-level member of body that only kvca may
// set ("" for none). body must be a JSON object (routing checked it).
func Reserved(body []byte) string {
	var p fastjson.Parser
	v, err := p.ParseBytes(body)
	if err != nil {
		return ""
	}
	o, err := v.Object()
	if err != nil {
		return ""
	}
	for _, k := range reserved {
		if o.Get(k) != nil {
			return k
		}
	}
	return ""
}

// ErrNoTransfer: a prefill worker's answer names no KV transfer.
var ErrNoTransfer = errors.New("the prefill answer has no kv_transfer_params object")

// prefillParams asks a vLLM prefill worker to keep the prompt's KV cache
// for a decode worker to read (vLLM's NixlConnector, as its disaggregated
// serving examples and llm-d's routing sidecar send it).
const prefillParams = `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`

// PrefillBody appends the vLLM prefill leg's body for the client's body
// of kind api: kv_transfer_params asking for a remote decode, stream
// false, no stream_options, the output capped at one token (max_tokens
// and max_completion_tokens, or max_output_tokens for Responses) and no
// min_tokens.
func PrefillBody(dst, body []byte, api API) ([]byte, error) {
	var p fastjson.Parser
	o, err := object(&p, body)
	if err != nil {
		return dst, err
	}
	caps := `"max_tokens":1,"max_completion_tokens":1`
	if api == Responses {
		caps = `"max_output_tokens":1`
	}
	return rewrite(dst, body, o, func(k string) bool {
		switch k {
		case "kv_transfer_params", "stream", "stream_options", "min_tokens", "max_tokens", "max_completion_tokens", "max_output_tokens":
			return true
		}
		return false
	}, `"kv_transfer_params":`+prefillParams+`,"stream":false,`+caps), nil
}

// TransferParams returns the kv_transfer_params object of a vLLM prefill
// worker's answer, as JSON, appended to dst.
func TransferParams(dst, answer []byte) ([]byte, error) {
	var p fastjson.Parser
	v, err := p.ParseBytes(answer)
	if err != nil {
		return dst, fmt.Errorf("the prefill answer is not JSON: %w", err)
	}
	t := v.Get("kv_transfer_params")
	if t == nil || t.Type() != fastjson.TypeObject {
		return dst, ErrNoTransfer
	}
	return t.MarshalTo(dst), nil
}

// DecodeBody appends the vLLM decode leg's body: the client's body with
// the prefill answer's kv_transfer_params (params, from TransferParams).
func DecodeBody(dst, body, params []byte) ([]byte, error) {
	var p, q fastjson.Parser
	o, err := object(&p, body)
	if err != nil {
		return dst, err
	}
	t, err := q.ParseBytes(params)
	if err != nil || t.Type() != fastjson.TypeObject {
		return dst, ErrNoTransfer
	}
	return rewrite(dst, body, o, func(k string) bool { return k == "kv_transfer_params" },
		`"kv_transfer_params":`+string(params)), nil
}

// BootstrapBody appends the body both SGLang legs carry: the client's
// body with the prefill worker's bootstrap server (host, port) and the
// room that pairs the two legs.
func BootstrapBody(dst, body []byte, host string, port int, room uint64) ([]byte, error) {
	var p fastjson.Parser
	o, err := object(&p, body)
	if err != nil {
		return dst, err
	}
	add := appendString([]byte(`"bootstrap_host":`), []byte(host))
	add = append(add, `,"bootstrap_port":`...)
	add = strconv.AppendInt(add, int64(port), 10)
	add = append(add, `,"bootstrap_room":`...)
	add = strconv.AppendUint(add, room, 10)
	return rewrite(dst, body, o, func(k string) bool {
		return k == "bootstrap_host" || k == "bootstrap_port" || k == "bootstrap_room"
	}, string(add)), nil
}

// Room is a bootstrap room from 64 random bits: SGLang takes a
// non-negative 63-bit integer.
func Room(random uint64) uint64 { return random >> 1 }

func object(p *fastjson.Parser, body []byte) (*fastjson.Object, error) {
	v, err := p.ParseBytes(body)
	if err != nil {
		return nil, fmt.Errorf("the request body is not JSON: %w", err)
	}
	o, err := v.Object()
	if err != nil {
		return nil, errors.New("the request body is not a JSON object")
	}
	return o, nil
}

// rewrite appends body's object o without the members drop names (every
// one of them: a client may repeat a member), then add (members,
// comma-separated). The members kept are written back as the client wrote
// them, names and values byte for byte: a name fastjson unescaped cannot
// always be escaped back to what it was (a lone surrogate escape stays
// literal text), so the names come from body itself, in o's order.
func rewrite(dst, body []byte, o *fastjson.Object, drop func(k string) bool, add string) []byte {
	dst = append(dst, '{')
	n := 0
	names := memberNames{b: body, i: openBrace(body)}
	o.Visit(func(k []byte, v *fastjson.Value) {
		raw := names.next()
		if drop(string(k)) {
			return
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = append(dst, '"')
		dst = append(dst, raw...)
		dst = append(dst, '"', ':')
		dst = v.MarshalTo(dst)
	})
	if n > 0 {
		dst = append(dst, ',')
	}
	dst = append(dst, add...)
	return append(dst, '}')
}

// openBrace is the index just past the '{' that opens body's object.
func openBrace(b []byte) int {
	for i, c := range b {
		if c == '{' {
			return i + 1
		}
	}
	return len(b)
}

// memberNames walks the top-level members of an object fastjson parsed,
// giving each name as written, without its quotes.
type memberNames struct {
	b []byte
	i int
}

func (m *memberNames) next() []byte {
	b := m.b
	for m.i < len(b) && b[m.i] != '"' {
		m.i++ // whitespace or the comma before the member
	}
	start := m.i + 1
	m.i = stringEnd(b, start)
	name := b[start:min(m.i, len(b))]
	m.i++ // past the closing quote
	// Skip the value: up to the ',' or '}' at this depth.
	for depth := 0; m.i < len(b); m.i++ {
		switch b[m.i] {
		case '"':
			m.i = stringEnd(b, m.i+1)
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return name
			}
			depth--
		case ',':
			if depth == 0 {
				return name
			}
		}
	}
	return name
}

// stringEnd is the index of the quote closing the string whose contents
// start at i (len(b) if none).
func stringEnd(b []byte, i int) int {
	for ; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return len(b)
}

// appendString appends s as a JSON string: quotes, backslashes and
// control characters escaped, every other byte as it is.
func appendString(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// Usage reads a JSON answer's prompt tokens and the cached tokens its
// engine reports (usage.prompt_tokens_details.cached_tokens); ok is false
// when it reports no cached tokens.
func Usage(answer []byte) (prompt, cached int64, ok bool) {
	var p fastjson.Parser
	v, err := p.ParseBytes(answer)
	if err != nil {
		return 0, 0, false
	}
	u := v.Get("usage")
	c := u.Get("prompt_tokens_details", "cached_tokens")
	if c == nil || c.Type() != fastjson.TypeNumber {
		return 0, 0, false
	}
	return u.GetInt64("prompt_tokens"), c.GetInt64(), true
}
