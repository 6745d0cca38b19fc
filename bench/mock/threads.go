package mock

import (
	"sync"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// The engine remembers the Responses API responses it produced (unless the
// request says store:false), as vLLM does in memory: a request with
// previous_response_id continues that thread, its prompt being the stored
// one (the earlier prompt and answer) followed by its own input, so it hits
// the cache exactly as the same conversation resent whole would. Continuing
// an id this engine never produced fails as OpenAI's API does: 400, code
// previous_response_not_found.

// responseStore holds each stored response's prompt and answer, bounded
// in bytes, the oldest forgotten first.
type responseStore struct {
	mu    sync.Mutex
	bytes int
	byID  map[string][]byte
	order []string
}

// maxStoreBytes bounds an engine's stored threads.
const maxStoreBytes = 256 << 20

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
	s.byID[id] = thread
	s.order = append(s.order, id)
	s.bytes += len(thread)
	for s.bytes > maxStoreBytes && len(s.order) > 1 {
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

// renderThread renders a Responses API request into j.prompt, starting
// from the stored thread when it continues one.
func (e *Engine) renderThread(j *job, req *fastjson.Value) ([]byte, error) {
	st := req.Get("store")
	j.store = st == nil || st.Type() != fastjson.TypeFalse
	prev := req.Get("previous_response_id")
	if prev == nil || prev.Type() == fastjson.TypeNull {
		return renderResponses(j.prompt[:0], req)
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
	// Instructions and tools of a continuation are not rendered again: the
	// thread already starts with the first request's.
	return renderInput(dst, req.Get("input"))
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
	j.respID = j.appendResponseID(j.respID[:0], "resp_")
	j.e.responses.put(string(j.respID), thread)
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
		return j.appendResponsesDelta(b, k)
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
