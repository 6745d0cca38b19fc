// Package workload builds the request streams the bench replays: synthetic
// multi-turn chat and Mooncake-format traces reconstructed into the chat
// requests a real client would send. It also computes a workload's ideal
// prefix-cache hit rate, the bound that routing policies are measured against.
package workload

import (
	"bytes"
	"strconv"
	"time"
)

// Request is one request of a workload, sent at At after the start.
type Request struct {
	At           time.Duration
	Session      int // conversation it belongs to
	Turn         int // 0 for a conversation's first request
	Path         string
	Body         []byte
	Stream       bool
	OutputTokens int // max_tokens in Body
	// Prefix names the shared prefix (a system prompt) the request starts
	// with, from 1; 0: none known. PrefixTokens is its length in tokens.
	Prefix, PrefixTokens int
	// Headers are sent with the request (a session header).
	Headers [][2]string
	// Class and Tenant, when set, are sent as X-KVCA-Priority and
	// X-KVCA-Tenant; the bench reports their TTFT apart (SetClass,
	// SpreadTenants).
	Class, Tenant string
	// Continues is 1 + the index of the request whose Responses API
	// answer this one continues, 0 if none: it is sent once that answer
	// is complete, with "previous_response_id" set to its id.
	Continues int
	// Full is the request with the whole conversation resent, the prompt
	// the engine renders for a continuation; Ideal uses it. nil: Body.
	Full []byte
}

// Workload is a named, time-ordered request list.
type Workload struct {
	Name     string
	Requests []Request
	// TraceIdeal is the ideal hit rate in the trace's own blocks, when the
	// workload comes from a trace (HasTraceIdeal).
	TraceIdeal    HitRate
	HasTraceIdeal bool
}

// HitRate is a token-weighted hit count.
type HitRate struct {
	QueryTokens, HitTokens int64
	// UniqueTokens is the working set: the tokens of the distinct blocks
	// of all prompts (set by IdealNovel).
	UniqueTokens int64
}

// Rate is HitTokens/QueryTokens, 0 for no queries.
func (h HitRate) Rate() float64 {
	if h.QueryTokens == 0 {
		return 0
	}
	return float64(h.HitTokens) / float64(h.QueryTokens)
}

// Duration is the time of the last arrival.
func (w *Workload) Duration() time.Duration {
	if len(w.Requests) == 0 {
		return 0
	}
	return w.Requests[len(w.Requests)-1].At
}

// message is one chat message of a request under construction; content is
// plain ASCII that needs no JSON escaping (see text.go).
type message struct {
	role    string
	content []byte
	toolRaw string // extra raw JSON members (tool_calls, tool_call_id), with leading comma
}

// chatBody encodes a chat request. Generation controls come last, as most
// clients put them; any order would do.
func chatBody(dst []byte, model string, tools string, msgs []message, maxTokens int, stream bool) []byte {
	dst = append(dst, `{"model":`...)
	dst = strconv.AppendQuote(dst, model)
	if tools != "" {
		dst = append(dst, `,"tools":`...)
		dst = append(dst, tools...)
	}
	dst = append(dst, `,"messages":[`...)
	for i, m := range msgs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"role":"`...)
		dst = append(dst, m.role...)
		dst = append(dst, `","content":`...)
		if m.content == nil {
			dst = append(dst, "null"...)
		} else {
			dst = append(dst, '"')
			dst = append(dst, m.content...)
			dst = append(dst, '"')
		}
		dst = append(dst, m.toolRaw...)
		dst = append(dst, '}')
	}
	dst = append(dst, `],"max_tokens":`...)
	dst = strconv.AppendInt(dst, int64(maxTokens), 10)
	if stream {
		dst = append(dst, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	return append(dst, '}')
}

// includeUsage is what the chat and completions bodies of a streamed
// request carry to ask for usage in the stream.
var includeUsage = []byte(`,"stream_options":{"include_usage":true}`)

// PlainStreams removes the request for usage from w's streamed chat and
// completions bodies: what an OpenAI SDK sends by default, whose streams
// carry no usage, so no cached-token count, unless the proxy asks.
func PlainStreams(w *Workload) {
	for i := range w.Requests {
		r := &w.Requests[i]
		if r.Stream {
			r.Body = bytes.Replace(r.Body, includeUsage, nil, 1)
		}
	}
}
