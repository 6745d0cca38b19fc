package mock

import (
	"strconv"
	"sync"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// The OpenAI Responses API on /v1/responses. The engine remembers the
// responses it produced (unless the request says store:false), as vLLM
// does in memory: a request with previous_response_id continues that
// thread, its prompt being the stored one (the earlier prompt and answer)
// followed by its own input, so it hits the cache exactly as the same
// conversation resent whole would. Continuing an id this engine never
// produced fails as OpenAI's API does: 400, code previous_response_not_found.

// responseStore holds each stored response's prompt and answer, bounded
// in bytes, the oldest forgotten first.
type responseStore struct {
	mu    sync.Mutex
	max   int
	bytes int
	byID  map[string][]byte
	order []string
}

// defaultStoreBytes bounds an engine's stored threads.
const defaultStoreBytes = 256 << 20

func (s *responseStore) get(dst []byte, id []byte) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.byID[string(id)]
	return append(dst, p...), ok
}

func (s *responseStore) put(id string, thread []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[string][]byte{}
	}
	if s.max <= 0 {
		s.max = defaultStoreBytes
	}
	s.byID[id] = thread
	s.order = append(s.order, id)
	s.bytes += len(thread)
	for s.bytes > s.max && len(s.order) > 1 {
		old := s.order[0]
		s.order = s.order[1:]
		s.bytes -= len(s.byID[old])
		delete(s.byID, old)
	}
}

func (s *responseStore) reset() {
	s.mu.Lock()
	s.byID, s.order, s.bytes = nil, nil, 0
	s.mu.Unlock()
}

// Len is how many responses are stored.
func (s *responseStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

// renderResponses renders a Responses API request into j.prompt, starting
// from the stored thread when it continues one.
func (e *Engine) renderResponses(j *job, req *fastjson.Value) ([]byte, error) {
	j.store = req.Get("store") == nil || req.Get("store").Type() != fastjson.TypeFalse
	prev := req.Get("previous_response_id")
	if prev == nil || prev.Type() == fastjson.TypeNull {
		return renderResponseItems(j.prompt[:0], req)
	}
	id, err := prev.StringBytes()
	if err != nil {
		return j.prompt, badParam("previous_response_id", "previous_response_id must be a string")
	}
	j.prevID = append(j.prevID[:0], id...)
	dst, ok := e.responses.get(j.prompt[:0], id)
	if !ok {
		return dst, &requestError{status: fasthttp.StatusBadRequest, param: "previous_response_id", code: "previous_response_not_found",
			msg: "Previous response with id '" + string(id) + "' not found."}
	}
	// Instructions and tools of a continuation are not re-rendered: the
	// thread already starts with the first request's.
	return renderInput(dst, req.Get("input"), true)
}

// renderResponseItems renders a whole Responses API request: tools, the
// instructions as a system turn, the input items, the generation prompt.
func renderResponseItems(dst []byte, req *fastjson.Value) ([]byte, error) {
	if tools := req.Get("tools"); tools != nil && tools.Type() == fastjson.TypeArray && len(tools.GetArray()) > 0 {
		dst = append(dst, toolsOpen...)
		dst = tools.MarshalTo(dst)
		dst = append(dst, '\n')
	}
	if ins := req.GetStringBytes("instructions"); len(ins) > 0 {
		dst = append(dst, "<|system|>\n"...)
		dst = append(dst, ins...)
		dst = append(dst, '\n')
	}
	return renderInput(dst, req.Get("input"), false)
}

// renderInput renders input (a string, or message and function items) and
// the generation prompt; a continuation may have none of its own.
func renderInput(dst []byte, in *fastjson.Value, continuation bool) ([]byte, error) {
	switch {
	case in == nil && continuation:
	case in == nil:
		return dst, badParam("input", "input is required")
	case in.Type() == fastjson.TypeString:
		dst = append(dst, "<|user|>\n"...)
		dst = append(dst, in.GetStringBytes()...)
		dst = append(dst, '\n')
	case in.Type() == fastjson.TypeArray:
		for _, it := range in.GetArray() {
			var err error
			if dst, err = renderItem(dst, it); err != nil {
				return dst, err
			}
		}
	default:
		return dst, badParam("input", "input must be a string or an array of items")
	}
	return append(dst, genPrompt...), nil
}

func renderItem(dst []byte, it *fastjson.Value) ([]byte, error) {
	switch string(it.GetStringBytes("type")) {
	case "", "message":
		role := it.GetStringBytes("role")
		if len(role) == 0 {
			return dst, badParam("input", "each input message needs a role")
		}
		dst = append(dst, "<|"...)
		dst = append(dst, role...)
		dst = append(dst, "|>\n"...)
		c := it.Get("content")
		switch {
		case c == nil:
		case c.Type() == fastjson.TypeString:
			dst = append(dst, c.GetStringBytes()...)
		case c.Type() == fastjson.TypeArray:
			for _, p := range c.GetArray() {
				switch string(p.GetStringBytes("type")) {
				case "input_text", "output_text", "text":
					dst = append(dst, p.GetStringBytes("text")...)
				default:
					dst = append(dst, "<|media|>"...)
				}
			}
		default:
			return dst, badParam("input", "content must be a string or an array of parts")
		}
	case "function_call":
		dst = append(dst, "<|assistant|>\n"...)
		dst = append(dst, toolUseOpen...)
		dst = append(dst, it.GetStringBytes("name")...)
		dst = append(dst, ' ')
		dst = append(dst, it.GetStringBytes("arguments")...)
	case "function_call_output":
		dst = append(dst, "<|tool|>\n"...)
		dst = append(dst, it.GetStringBytes("output")...)
	default:
		dst = append(dst, "<|"...)
		dst = append(dst, it.GetStringBytes("type")...)
		dst = append(dst, "|>\n"...)
	}
	return append(dst, '\n'), nil
}

// OutputText is the text the engine answers with n output tokens, so a
// workload can resend a conversation's history as the client would.
func OutputText(n int) string { return string(appendOutputText(nil, n)) }

func appendOutputText(b []byte, n int) []byte {
	for k := 0; k < n; k++ {
		b = append(b, words[k%len(words)]...)
	}
	return b
}

func (j *job) appendResponseID(b []byte) []byte {
	b = append(b, "resp_"...)
	b = append(b, j.e.idPrefix...)
	return strconv.AppendUint(b, j.id, 10)
}

// finished runs once an answer is complete: a Responses API answer is
// stored for continuations.
func (j *job) finished() {
	if j.api != apiResponses || !j.store {
		return
	}
	thread := make([]byte, 0, len(j.prompt)+j.maxTokens*BytesPerToken+1)
	thread = append(thread, j.prompt...)
	thread = appendOutputText(thread, j.maxTokens)
	thread = append(thread, '\n')
	j.respID = j.appendResponseID(j.respID[:0])
	j.e.responses.put(string(j.respID), thread)
}

// appendResponse appends the response object; done says whether the
// answer is complete (with its output and usage) or just created.
func (j *job) appendResponse(b []byte, done bool) []byte {
	b = append(b, `{"id":"`...)
	b = j.appendResponseID(b)
	b = append(b, `","object":"response","created_at":`...)
	b = strconv.AppendInt(b, j.created, 10)
	if done {
		b = append(b, `,"status":"completed"`...)
	} else {
		b = append(b, `,"status":"in_progress"`...)
	}
	b = append(b, `,"model":`...)
	b = appendJSONString(b, j.model)
	b = append(b, `,"previous_response_id":`...)
	if len(j.prevID) > 0 {
		b = appendJSONString(b, string(j.prevID))
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"store":`...)
	b = strconv.AppendBool(b, j.store)
	if !done {
		return append(b, `,"output":[],"usage":null}`...)
	}
	b = append(b, `,"output":[`...)
	b = j.appendOutputItem(b, true)
	b = append(b, `],"usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(j.promptTokens), 10)
	b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(j.cached), 10)
	b = append(b, `},"output_tokens":`...)
	b = strconv.AppendInt(b, int64(j.maxTokens), 10)
	b = append(b, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
	b = strconv.AppendInt(b, int64(j.promptTokens+j.maxTokens), 10)
	return append(b, "}}"...)
}

func (j *job) appendOutputItem(b []byte, done bool) []byte {
	b = append(b, `{"type":"message","id":"msg_`...)
	b = append(b, j.e.idPrefix...)
	b = strconv.AppendUint(b, j.id, 10)
	if !done {
		return append(b, `","status":"in_progress","role":"assistant","content":[]}`...)
	}
	b = append(b, `","status":"completed","role":"assistant","content":[`...)
	b = j.appendTextPart(b, true)
	return append(b, "]}"...)
}

func (j *job) appendTextPart(b []byte, done bool) []byte {
	b = append(b, `{"type":"output_text","text":"`...)
	if done {
		b = appendOutputText(b, j.maxTokens)
	}
	return append(b, `","annotations":[]}`...)
}

// appendRespEvent starts a Responses API SSE event up to its own members.
func (j *job) appendRespEvent(b []byte, typ string, seq int) []byte {
	b = appendEvent(b, typ)
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","sequence_number":`...)
	return strconv.AppendInt(b, int64(seq), 10)
}

func (j *job) appendItemRef(b []byte) []byte {
	b = append(b, `,"item_id":"msg_`...)
	b = append(b, j.e.idPrefix...)
	b = strconv.AppendUint(b, j.id, 10)
	return append(b, `","output_index":0,"content_index":0`...)
}

func (j *job) appendResponsesOpening(b []byte) []byte {
	b = j.appendRespEvent(b, "response.created", 0)
	b = append(b, `,"response":`...)
	b = j.appendResponse(b, false)
	b = append(b, "}\n\n"...)
	b = j.appendRespEvent(b, "response.output_item.added", 1)
	b = append(b, `,"output_index":0,"item":`...)
	b = j.appendOutputItem(b, false)
	b = append(b, "}\n\n"...)
	b = j.appendRespEvent(b, "response.content_part.added", 2)
	b = j.appendItemRef(b)
	b = append(b, `,"part":`...)
	b = j.appendTextPart(b, false)
	return append(b, "}\n\n"...)
}

func (j *job) appendResponsesToken(b []byte, k int) []byte {
	b = j.appendRespEvent(b, "response.output_text.delta", 3+k)
	b = j.appendItemRef(b)
	b = append(b, `,"delta":"`...)
	b = append(b, words[k%len(words)]...)
	return append(b, "\"}\n\n"...)
}

func (j *job) appendResponsesClosing(b []byte) []byte {
	seq := 3 + j.maxTokens
	b = j.appendRespEvent(b, "response.output_text.done", seq)
	b = j.appendItemRef(b)
	b = append(b, `,"text":"`...)
	b = appendOutputText(b, j.maxTokens)
	b = append(b, "\"}\n\n"...)
	b = j.appendRespEvent(b, "response.content_part.done", seq+1)
	b = j.appendItemRef(b)
	b = append(b, `,"part":`...)
	b = j.appendTextPart(b, true)
	b = append(b, "}\n\n"...)
	b = j.appendRespEvent(b, "response.output_item.done", seq+2)
	b = append(b, `,"output_index":0,"item":`...)
	b = j.appendOutputItem(b, true)
	b = append(b, "}\n\n"...)
	b = j.appendRespEvent(b, "response.completed", seq+3)
	b = append(b, `,"response":`...)
	b = j.appendResponse(b, true)
	return append(b, "}\n\n"...)
}

// failCode writes an OpenAI-shaped error with its own code.
func (e *Engine) failCode(ctx *fasthttp.RequestCtx, a api, status int, typ, param, code, msg string) {
	if a == apiMessages {
		e.failAnthropic(ctx, status, msg)
		return
	}
	b := append(make([]byte, 0, 128+len(msg)), `{"error":{"message":`...)
	b = appendJSONString(b, msg)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"param":`...)
	b = appendJSONString(b, param)
	b = append(b, `,"code":`...)
	b = appendJSONString(b, code)
	b = append(b, "}}"...)
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// The answer's pieces by API: the whole JSON answer, and a stream's events
// before the first token, per token, and after the last.

func (j *job) appendAnswer(b []byte) []byte {
	switch j.api {
	case apiMessages:
		return j.appendMessage(b)
	case apiResponses:
		return j.appendResponse(b, true)
	}
	return j.appendCompletion(b)
}

func (j *job) appendOpening(b []byte) []byte {
	switch j.api {
	case apiChat:
		return j.appendChunk(b, -1)
	case apiMessages:
		return j.appendMessageOpening(b)
	case apiResponses:
		return j.appendResponsesOpening(b)
	}
	return b
}

func (j *job) appendToken(b []byte, k int) []byte {
	switch j.api {
	case apiMessages:
		return j.appendMessageToken(b, k)
	case apiResponses:
		return j.appendResponsesToken(b, k)
	}
	return j.appendChunk(b, k)
}

func (j *job) appendClosing(b []byte) []byte {
	switch j.api {
	case apiMessages:
		return j.appendMessageClosing(b)
	case apiResponses:
		return j.appendResponsesClosing(b)
	}
	if j.usage {
		b = j.appendUsageChunk(b)
	}
	return append(b, "data: [DONE]\n\n"...)
}
