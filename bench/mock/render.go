package mock

import (
	"encoding/binary"
	"errors"

	"github.com/valyala/fastjson"
)

// BytesPerToken is the mock tokenizer's rule: token i is bytes [4i, 4i+4) of
// the rendered prompt. Workloads size their text with it so that trace token
// counts survive the round trip through the engine.
const BytesPerToken = 4

// Paths the engine serves completions on.
const (
	PathChat        = "/v1/chat/completions"
	PathCompletions = "/v1/completions"
	PathMessages    = "/v1/messages" // Anthropic Messages API
)

// Template markers. The generation prompt equals the opening of an assistant
// message, so the prompt of turn N is a byte prefix of turn N+1's whenever the
// client re-sends the history, which is what makes prefix caching work in a
// real engine too.
const (
	genPrompt = "<|assistant|>\n"
	toolsOpen = "<|tools|>\n"
)

var errBadRequest = errors.New("bad request")

// requestError is a client error, reported as HTTP 400 with param set.
type requestError struct {
	msg   string
	param string
	// status and code, when set, replace 400 and the default code (an
	// unknown previous_response_id)
	status int
	code   string
}

func (e *requestError) Error() string { return e.msg }

func badParam(param, msg string) error { return &requestError{msg: msg, param: param} }

// Tokens returns how many tokens the mock tokenizer counts in a rendered prompt.
func Tokens(prompt []byte) int { return (len(prompt) + BytesPerToken - 1) / BytesPerToken }

// Render appends to dst the prompt an engine renders for a request body sent
// to path (PathChat, PathCompletions, PathMessages, or PathResponses without
// previous_response_id). It is what the engine itself does,
// exported so that workloads can compute ideal hit rates in the engine's units.
func Render(dst []byte, path string, body []byte) ([]byte, error) {
	var p fastjson.Parser
	v, err := p.ParseBytes(body)
	if err != nil {
		return dst, err
	}
	if v.Type() != fastjson.TypeObject {
		return dst, errBadRequest
	}
	switch path {
	case PathCompletions:
		return renderCompletion(dst, v)
	case PathMessages:
		return renderMessages(dst, v)
	case PathResponses:
		if v.Get("previous_response_id") != nil {
			return dst, badParam("previous_response_id", "Render cannot know the thread a previous_response_id continues")
		}
		return renderResponses(dst, v)
	}
	return renderChat(dst, v)
}

// renderChat renders messages (and tools) with the mock chat template:
// "<|role|>\ncontent\n" per message, then the generation prompt.
func renderChat(dst []byte, req *fastjson.Value) ([]byte, error) {
	msgs := req.Get("messages")
	if msgs == nil {
		return dst, badParam("messages", "messages is required")
	}
	arr, err := msgs.Array()
	if err != nil {
		return dst, badParam("messages", "messages must be an array")
	}
	if len(arr) == 0 {
		return dst, badParam("messages", "messages must not be empty")
	}
	if tools := req.Get("tools"); tools != nil && tools.Type() != fastjson.TypeNull {
		if tools.Type() != fastjson.TypeArray {
			return dst, badParam("tools", "tools must be an array")
		}
		dst = append(dst, toolsOpen...)
		dst = tools.MarshalTo(dst)
		dst = append(dst, '\n')
	}
	for _, m := range arr {
		if m.Type() != fastjson.TypeObject {
			return dst, badParam("messages", "each message must be an object")
		}
		rv := m.Get("role")
		if rv == nil || rv.Type() != fastjson.TypeString || len(rv.GetStringBytes()) == 0 {
			return dst, badParam("messages", "each message needs a string role")
		}
		role, err := rv.StringBytes()
		if err != nil {
			return dst, badParam("messages", "each message needs a string role")
		}
		dst = append(dst, "<|"...)
		dst = append(dst, role...)
		dst = append(dst, "|>\n"...)
		if dst, err = renderContent(dst, m.Get("content")); err != nil {
			return dst, err
		}
		for _, tc := range m.GetArray("tool_calls") {
			dst = append(dst, "<|tool_call|>"...)
			dst = append(dst, tc.GetStringBytes("function", "name")...)
			dst = append(dst, ' ')
			dst = append(dst, tc.GetStringBytes("function", "arguments")...)
		}
		dst = append(dst, '\n')
	}
	if gp := req.Get("add_generation_prompt"); gp == nil || gp.Type() != fastjson.TypeFalse {
		dst = append(dst, genPrompt...)
	}
	return dst, nil
}

func renderContent(dst []byte, c *fastjson.Value) ([]byte, error) {
	if c == nil {
		return dst, nil
	}
	switch c.Type() {
	case fastjson.TypeNull:
		return dst, nil
	case fastjson.TypeString:
		s, _ := c.StringBytes()
		return append(dst, s...), nil
	case fastjson.TypeArray:
		parts, _ := c.Array()
		for _, p := range parts {
			switch string(p.GetStringBytes("type")) {
			case "text":
				dst = append(dst, p.GetStringBytes("text")...)
			case "":
				return dst, badParam("messages", "content part without type")
			default:
				// Media parts occupy a fixed placeholder, as a template's
				// image token would.
				dst = append(dst, "<|media|>"...)
			}
		}
		return dst, nil
	}
	return dst, badParam("messages", "content must be a string, an array of parts or null")
}

// renderCompletion renders a /v1/completions prompt: a string as is, a token
// array as 4 little-endian bytes per token so that token i is bytes [4i,4i+4).
func renderCompletion(dst []byte, req *fastjson.Value) ([]byte, error) {
	p := req.Get("prompt")
	if p == nil {
		return dst, badParam("prompt", "prompt is required")
	}
	switch p.Type() {
	case fastjson.TypeString:
		s, _ := p.StringBytes()
		if len(s) == 0 {
			return dst, badParam("prompt", "prompt must not be empty")
		}
		return append(dst, s...), nil
	case fastjson.TypeArray:
		arr, _ := p.Array()
		if len(arr) == 0 {
			return dst, badParam("prompt", "prompt must not be empty")
		}
		if len(arr) == 1 && arr[0].Type() == fastjson.TypeString {
			s, _ := arr[0].StringBytes()
			if len(s) == 0 {
				return dst, badParam("prompt", "prompt must not be empty")
			}
			return append(dst, s...), nil
		}
		for _, t := range arr {
			id, err := t.Int64()
			if err != nil || id < 0 || id > 1<<32-1 {
				return dst, badParam("prompt", "prompt must be a string or an array of token ids (batches are not supported)")
			}
			dst = binary.LittleEndian.AppendUint32(dst, uint32(id))
		}
		return dst, nil
	}
	return dst, badParam("prompt", "prompt must be a string or an array of token ids")
}

// BlockHashes appends the chained hash of every complete block of
// blockTokens tokens of prompt: hash[i] depends on blocks 0..i, so equal
// hashes mean equal prefixes, as in vLLM's prefix cache.
func BlockHashes(dst []uint64, prompt []byte, blockTokens int) []uint64 {
	bs := blockTokens * BytesPerToken
	if bs <= 0 {
		return dst
	}
	var h uint64
	for off := 0; off+bs <= len(prompt); off += bs {
		h = chainHash(h, prompt[off:off+bs])
		dst = append(dst, h)
	}
	return dst
}

// chainHash mixes a block into its parent's hash. Non-cryptographic: the mock
// only needs few collisions among a few million blocks.
func chainHash(parent uint64, b []byte) uint64 {
	h := parent ^ 0x9e3779b97f4a7c15
	for len(b) >= 8 {
		h ^= binary.LittleEndian.Uint64(b)
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 31
		b = b[8:]
	}
	for _, c := range b {
		h ^= uint64(c)
		h *= 0x94d049bb133111eb
	}
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 32
	return h
}
