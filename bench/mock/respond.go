package mock

import (
	"strconv"
	"unicode/utf8"
)

// words are the mock's output tokens, 4 bytes each like its prompt tokens,
// and free of characters that JSON would escape.
var words = [...]string{
	"the ", "kv  ", "hit ", "and ", "now ", "fast", " ok ", "mock",
	"data", "run ", "so, ", "yes ", "to  ", "of  ", "it. ", "go! ",
}

func (j *job) appendHead(b []byte, object string) []byte {
	b = append(b, `{"id":"`...)
	if j.chat {
		b = append(b, "chatcmpl-"...)
	} else {
		b = append(b, "cmpl-"...)
	}
	b = append(b, j.e.idPrefix...)
	b = strconv.AppendUint(b, j.id, 10)
	b = append(b, `","object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, j.created, 10)
	b = append(b, `,"model":`...)
	return appendJSONString(b, j.model)
}

func (j *job) appendUsage(b []byte) []byte {
	b = append(b, `"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(j.promptTokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(j.promptTokens+j.maxTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(j.maxTokens), 10)
	if j.noCache {
		// As an engine without prefix caching, or vLLM without
		// --enable-prompt-tokens-details: no count rather than a false 0,
		// which a cache-aware router in front would take for evictions.
		return append(b, '}')
	}
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(j.cached), 10)
	return append(b, "}}"...)
}

// appendCompletion appends a whole non-streaming response.
func (j *job) appendCompletion(b []byte) []byte {
	if j.chat {
		b = j.appendHead(b, "chat.completion")
		b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":"`...)
	} else {
		b = j.appendHead(b, "text_completion")
		b = append(b, `,"choices":[{"index":0,"text":"`...)
	}
	for k := 0; k < j.maxTokens; k++ {
		b = append(b, words[k%len(words)]...)
	}
	if j.chat {
		b = append(b, `"},"logprobs":null,"finish_reason":"length"}],`...)
	} else {
		b = append(b, `","logprobs":null,"finish_reason":"length"}],`...)
	}
	b = j.appendUsage(b)
	return append(b, '}')
}

// appendChunk appends SSE event k: the role announcement for k < 0 (chat
// only, as vLLM sends it), otherwise output token k.
func (j *job) appendChunk(b []byte, k int) []byte {
	b = append(b, "data: "...)
	if j.chat {
		b = j.appendHead(b, "chat.completion.chunk")
		if k < 0 {
			b = append(b, `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`...)
			return append(b, "\n\n"...)
		}
		b = append(b, `,"choices":[{"index":0,"delta":{"content":"`...)
		b = append(b, words[k%len(words)]...)
		b = append(b, `"},"logprobs":null,"finish_reason":`...)
	} else {
		b = j.appendHead(b, "text_completion")
		b = append(b, `,"choices":[{"index":0,"text":"`...)
		b = append(b, words[k%len(words)]...)
		b = append(b, `","logprobs":null,"finish_reason":`...)
	}
	if k == j.maxTokens-1 {
		b = append(b, `"length"}]}`...)
	} else {
		b = append(b, `null}]}`...)
	}
	return append(b, "\n\n"...)
}

// appendUsageChunk is the final event of stream_options.include_usage.
func (j *job) appendUsageChunk(b []byte) []byte {
	b = append(b, "data: "...)
	if j.chat {
		b = j.appendHead(b, "chat.completion.chunk")
	} else {
		b = j.appendHead(b, "text_completion")
	}
	b = append(b, `,"choices":[],`...)
	b = j.appendUsage(b)
	return append(b, "}\n\n"...)
}

func modelsJSON(models []string) []byte {
	b := []byte(`{"object":"list","data":[`)
	for i, m := range models {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendJSONString(b, m)
		b = append(b, `,"object":"model","created":0,"owned_by":"kvca-mock","root":`...)
		b = appendJSONString(b, m)
		b = append(b, `,"parent":null}`...)
	}
	return append(b, "]}"...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string literal.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
		case c < utf8.RuneSelf:
			b = append(b, c)
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, s[i:i+n]...)
			}
			i += n
			continue
		}
		i++
	}
	return append(b, '"')
}
