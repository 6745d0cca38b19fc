package mock

import (
	"strconv"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// The Anthropic Messages API, as vLLM and SGLang serve it on /v1/messages:
// the prompt is rendered with the same template as chat (tools, then the
// system prompt as a system turn, then each message and its content
// blocks), cache_control hints are ignored as engines ignore them, and
// the answer is a text block (or, when tool_choice forces a tool, a
// tool_use block) in Anthropic's JSON or SSE shape.

const (
	toolUseOpen    = "<|tool_call|>"
	toolResultOpen = "<|tool_result|>"
)

// renderMessages renders a Messages API request: "<|tools|>\n" and the
// tools' JSON, the system prompt as "<|system|>\n...\n", each message as
// "<|role|>\ncontent\n", then the generation prompt.
func renderMessages(dst []byte, req *fastjson.Value) ([]byte, error) {
	msgs := req.Get("messages")
	if msgs == nil || msgs.Type() != fastjson.TypeArray {
		return dst, badParam("messages", "messages: Field required")
	}
	arr, _ := msgs.Array()
	if len(arr) == 0 {
		return dst, badParam("messages", "messages: at least one message is required")
	}
	if tools := req.Get("tools"); tools != nil && tools.Type() != fastjson.TypeNull {
		if tools.Type() != fastjson.TypeArray {
			return dst, badParam("tools", "tools: Input should be a valid list")
		}
		dst = append(dst, toolsOpen...)
		dst = tools.MarshalTo(dst)
		dst = append(dst, '\n')
	}
	if sys := req.Get("system"); sys != nil && sys.Type() != fastjson.TypeNull {
		dst = append(dst, "<|system|>\n"...)
		var err error
		if dst, err = renderBlocks(dst, sys, "system"); err != nil {
			return dst, err
		}
		dst = append(dst, '\n')
	}
	for _, m := range arr {
		role := m.GetStringBytes("role")
		if m.Type() != fastjson.TypeObject || (string(role) != "user" && string(role) != "assistant") {
			return dst, badParam("messages", "messages: each message needs role user or assistant")
		}
		dst = append(dst, "<|"...)
		dst = append(dst, role...)
		dst = append(dst, "|>\n"...)
		var err error
		if dst, err = renderBlocks(dst, m.Get("content"), "messages"); err != nil {
			return dst, err
		}
		dst = append(dst, '\n')
	}
	return append(dst, genPrompt...), nil
}

// renderBlocks renders a content string or list of content blocks.
func renderBlocks(dst []byte, c *fastjson.Value, param string) ([]byte, error) {
	if c == nil {
		return dst, badParam(param, param+": content: Field required")
	}
	switch c.Type() {
	case fastjson.TypeString:
		return append(dst, c.GetStringBytes()...), nil
	case fastjson.TypeArray:
	default:
		return dst, badParam(param, param+": content must be a string or a list of content blocks")
	}
	for _, b := range c.GetArray() {
		switch string(b.GetStringBytes("type")) {
		case "text":
			dst = append(dst, b.GetStringBytes("text")...)
		case "thinking":
			dst = append(dst, b.GetStringBytes("thinking")...)
		case "tool_use":
			dst = append(dst, toolUseOpen...)
			dst = append(dst, b.GetStringBytes("name")...)
			dst = append(dst, ' ')
			if in := b.Get("input"); in != nil {
				dst = in.MarshalTo(dst)
			}
		case "tool_result":
			dst = append(dst, toolResultOpen...)
			if rc := b.Get("content"); rc != nil {
				var err error
				if dst, err = renderBlocks(dst, rc, param); err != nil {
					return dst, err
				}
			}
		case "":
			return dst, badParam(param, param+": each content block needs a type")
		default:
			dst = append(dst, "<|media|>"...)
		}
	}
	return dst, nil
}

// toolChoice appends the name of the tool the answer must call: the named
// one for {"type":"tool"}, the first for {"type":"any"}; nothing otherwise.
func toolChoice(dst []byte, req *fastjson.Value) []byte {
	switch string(req.GetStringBytes("tool_choice", "type")) {
	case "tool":
		return append(dst, req.GetStringBytes("tool_choice", "name")...)
	case "any":
		if tools := req.GetArray("tools"); len(tools) > 0 {
			return append(dst, tools[0].GetStringBytes("name")...)
		}
	}
	return dst
}

func (j *job) appendMessageID(b []byte) []byte {
	b = append(b, `"msg_`...)
	b = append(b, j.e.idPrefix...)
	b = strconv.AppendUint(b, j.id, 10)
	return append(b, '"')
}

// appendAnthropicUsage: Anthropic counts cached prompt tokens apart from
// input_tokens.
func (j *job) appendAnthropicUsage(b []byte, output int) []byte {
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(j.promptTokens-j.cached), 10)
	b = append(b, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":`...)
	b = strconv.AppendInt(b, int64(j.cached), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(output), 10)
	return append(b, '}')
}

func (j *job) stopReason() string {
	if len(j.tool) > 0 {
		return "tool_use"
	}
	return "max_tokens"
}

// appendToolInput appends the tool call's input: {"q":"<output text>"}.
func (j *job) appendToolInput(b []byte) []byte {
	b = append(b, `{"q":"`...)
	b = appendOutputText(b, j.maxTokens)
	return append(b, `"}`...)
}

// appendMessage appends a whole non-streaming Messages API answer.
func (j *job) appendMessage(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = j.appendMessageID(b)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = appendJSONString(b, j.model)
	if len(j.tool) > 0 {
		b = append(b, `,"content":[{"type":"tool_use","id":"toolu_`...)
		b = strconv.AppendUint(b, j.id, 10)
		b = append(b, `","name":`...)
		b = appendJSONString(b, string(j.tool))
		b = append(b, `,"input":`...)
		b = j.appendToolInput(b)
		b = append(b, `}]`...)
	} else {
		b = append(b, `,"content":[{"type":"text","text":"`...)
		b = appendOutputText(b, j.maxTokens)
		b = append(b, `"}]`...)
	}
	b = append(b, `,"stop_reason":"`...)
	b = append(b, j.stopReason()...)
	b = append(b, `","stop_sequence":null,"usage":`...)
	b = j.appendAnthropicUsage(b, j.maxTokens)
	return append(b, '}')
}

func appendEvent(b []byte, name string) []byte {
	b = append(b, "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: "...)
	return b
}

// appendMessageOpening: message_start and the content block's start.
func (j *job) appendMessageOpening(b []byte) []byte {
	b = appendEvent(b, "message_start")
	b = append(b, `{"type":"message_start","message":{"id":`...)
	b = j.appendMessageID(b)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = appendJSONString(b, j.model)
	b = append(b, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":`...)
	b = j.appendAnthropicUsage(b, 1)
	b = append(b, "}}\n\n"...)
	b = appendEvent(b, "content_block_start")
	if len(j.tool) > 0 {
		b = append(b, `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_`...)
		b = strconv.AppendUint(b, j.id, 10)
		b = append(b, `","name":`...)
		b = appendJSONString(b, string(j.tool))
		b = append(b, `,"input":{}}}`...)
	} else {
		b = append(b, `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`...)
	}
	b = append(b, "\n\n"...)
	b = appendEvent(b, "ping")
	return append(b, "{\"type\":\"ping\"}\n\n"...)
}

// appendMessageToken: one content_block_delta per output token.
func (j *job) appendMessageToken(b []byte, k int) []byte {
	b = appendEvent(b, "content_block_delta")
	if len(j.tool) == 0 {
		b = append(b, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`...)
		b = append(b, words[k%len(words)]...)
		return append(b, "\"}}\n\n"...)
	}
	// The input's JSON, a piece per token, escaped as a JSON string.
	b = append(b, `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"`...)
	if k == 0 {
		b = append(b, `{\"q\":\"`...)
	}
	b = append(b, words[k%len(words)]...)
	if k == j.maxTokens-1 {
		b = append(b, `\"}`...)
	}
	return append(b, "\"}}\n\n"...)
}

func (j *job) appendMessageClosing(b []byte) []byte {
	b = appendEvent(b, "content_block_stop")
	b = append(b, "{\"type\":\"content_block_stop\",\"index\":0}\n\n"...)
	b = appendEvent(b, "message_delta")
	b = append(b, `{"type":"message_delta","delta":{"stop_reason":"`...)
	b = append(b, j.stopReason()...)
	b = append(b, `","stop_sequence":null},"usage":{"output_tokens":`...)
	b = strconv.AppendInt(b, int64(j.maxTokens), 10)
	b = append(b, "}}\n\n"...)
	b = appendEvent(b, "message_stop")
	return append(b, "{\"type\":\"message_stop\"}\n\n"...)
}

// anthropicErrorType maps a status to Anthropic's error types.
func anthropicErrorType(status int) string {
	switch status {
	case fasthttp.StatusBadRequest:
		return "invalid_request_error"
	case fasthttp.StatusUnauthorized:
		return "authentication_error"
	case fasthttp.StatusForbidden:
		return "permission_error"
	case fasthttp.StatusNotFound:
		return "not_found_error"
	case fasthttp.StatusRequestEntityTooLarge:
		return "request_too_large"
	case fasthttp.StatusTooManyRequests:
		return "rate_limit_error"
	case fasthttp.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	return "api_error"
}

// failAnthropic writes {"type":"error","error":{"type":...,"message":...}}.
func (e *Engine) failAnthropic(ctx *fasthttp.RequestCtx, status int, msg string) {
	b := append(make([]byte, 0, 96+len(msg)), `{"type":"error","error":{"type":"`...)
	b = append(b, anthropicErrorType(status)...)
	b = append(b, `","message":`...)
	b = appendJSONString(b, msg)
	b = append(b, "}}"...)
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// failAPI writes an error in the shape of the request's API.
func (e *Engine) failAPI(ctx *fasthttp.RequestCtx, a api, status int, typ, param, msg string) {
	if a == apiMessages {
		e.failAnthropic(ctx, status, msg)
		return
	}
	e.fail(ctx, status, typ, param, msg)
}

func (e *Engine) badRequestAPI(ctx *fasthttp.RequestCtx, a api, param, msg string) {
	e.badRequests.Add(1)
	e.failAPI(ctx, a, fasthttp.StatusBadRequest, "BadRequestError", param, msg)
}
