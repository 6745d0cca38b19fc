package mock

import (
	"strconv"

	"github.com/valyala/fastjson"
)

// PathResponses is the OpenAI Responses API, served like chat: the input
// items are rendered with the chat template, the answer is one assistant
// message of output text, streamed as Responses events.
const PathResponses = "/v1/responses"

// renderResponses renders instructions, tools and input items with the
// mock chat template: instructions as a system message, each message item
// as "<|role|>\ncontent\n", a function call and its output as a tool call
// and a tool message, then the generation prompt. As with chat, the prompt
// of turn N is a byte prefix of turn N+1's when the client re-sends the
// items.
func renderResponses(dst []byte, req *fastjson.Value) ([]byte, error) {
	if tools := req.Get("tools"); tools != nil && tools.Type() != fastjson.TypeNull {
		if tools.Type() != fastjson.TypeArray {
			return dst, badParam("tools", "tools must be an array")
		}
		dst = append(dst, toolsOpen...)
		dst = tools.MarshalTo(dst)
		dst = append(dst, '\n')
	}
	if in := req.Get("instructions"); in != nil && in.Type() != fastjson.TypeNull {
		s, err := in.StringBytes()
		if err != nil {
			return dst, badParam("instructions", "instructions must be a string")
		}
		dst = append(dst, "<|system|>\n"...)
		dst = append(dst, s...)
		dst = append(dst, '\n')
	}
	return renderInput(dst, req.Get("input"))
}

// renderInput renders the input items (or string) and the generation
// prompt.
func renderInput(dst []byte, input *fastjson.Value) ([]byte, error) {
	if input == nil {
		return dst, badParam("input", "input is required")
	}
	switch input.Type() {
	case fastjson.TypeString:
		s, _ := input.StringBytes()
		if len(s) == 0 {
			return dst, badParam("input", "input must not be empty")
		}
		dst = append(dst, "<|user|>\n"...)
		dst = append(dst, s...)
		dst = append(dst, '\n')
	case fastjson.TypeArray:
		items, _ := input.Array()
		if len(items) == 0 {
			return dst, badParam("input", "input must not be empty")
		}
		for _, it := range items {
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

// renderItem renders one input item of the Responses API.
func renderItem(dst []byte, it *fastjson.Value) ([]byte, error) {
	if it.Type() != fastjson.TypeObject {
		return dst, badParam("input", "each input item must be an object")
	}
	typ := string(it.GetStringBytes("type"))
	switch typ {
	case "", "message":
		role := it.GetStringBytes("role")
		if len(role) == 0 {
			return dst, badParam("input", "each message item needs a string role")
		}
		dst = append(dst, "<|"...)
		dst = append(dst, role...)
		dst = append(dst, "|>\n"...)
		c := it.Get("content")
		if c != nil && c.Type() == fastjson.TypeArray {
			parts, _ := c.Array()
			for _, p := range parts {
				switch string(p.GetStringBytes("type")) {
				case "input_text", "output_text", "text":
					dst = append(dst, p.GetStringBytes("text")...)
				case "":
					return dst, badParam("input", "content part without type")
				default:
					dst = append(dst, "<|media|>"...)
				}
			}
		} else {
			var err error
			if dst, err = renderContent(dst, c); err != nil {
				return dst, badParam("input", "content must be a string or an array of parts")
			}
		}
	case "function_call":
		dst = append(dst, "<|tool_call|>"...)
		dst = append(dst, it.GetStringBytes("name")...)
		dst = append(dst, ' ')
		dst = append(dst, it.GetStringBytes("arguments")...)
	case "function_call_output":
		dst = append(dst, "<|tool|>\n"...)
		if o := it.Get("output"); o != nil && o.Type() == fastjson.TypeString {
			dst = append(dst, o.GetStringBytes()...)
		} else if o != nil {
			dst = o.MarshalTo(dst)
		}
	default:
		// Reasoning, item references and the like: their JSON, as a
		// template would render an item it passes through.
		dst = append(dst, "<|item|>"...)
		dst = it.MarshalTo(dst)
	}
	return append(dst, '\n'), nil
}

// appendResponseID appends the ids of a response and of its message.
func (j *job) appendResponseID(b []byte, prefix string) []byte {
	b = append(b, prefix...)
	b = append(b, j.e.idPrefix...)
	return strconv.AppendUint(b, j.id, 10)
}

// appendText appends the answer's output text (unquoted: the words need no
// escaping).
func (j *job) appendText(b []byte) []byte {
	for k := 0; k < j.maxTokens; k++ {
		b = append(b, words[k%len(words)]...)
	}
	return b
}

// appendMessageItem appends the output message item, with its text when
// done, empty while in progress.
func (j *job) appendMessageItem(b []byte, done bool) []byte {
	b = append(b, `{"id":"`...)
	b = j.appendResponseID(b, "msg_")
	b = append(b, `","type":"message","role":"assistant","status":`...)
	if !done {
		return append(b, `"in_progress","content":[]}`...)
	}
	b = append(b, `"completed","content":[`...)
	b = j.appendTextPart(b, true)
	return append(b, "]}"...)
}

func (j *job) appendTextPart(b []byte, withText bool) []byte {
	b = append(b, `{"type":"output_text","text":"`...)
	if withText {
		b = j.appendText(b)
	}
	return append(b, `","annotations":[]}`...)
}

// appendResponse appends a response object: in progress (no output, no
// usage) or completed (the message and the usage).
func (j *job) appendResponse(b []byte, done bool) []byte {
	b = append(b, `{"id":"`...)
	b = j.appendResponseID(b, "resp_")
	b = append(b, `","object":"response","created_at":`...)
	b = strconv.AppendInt(b, j.created, 10)
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
		return append(b, `,"status":"in_progress","output":[],"usage":null}`...)
	}
	b = append(b, `,"status":"completed","output":[`...)
	b = j.appendMessageItem(b, true)
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

// appendEventHead opens Responses event typ: its SSE event line and the
// data object's type and sequence number; the caller adds the fields and
// closes it with appendEventEnd.
func (j *job) appendEventHead(b []byte, typ string) []byte {
	b = append(b, "event: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: {\"type\":\""...)
	b = append(b, typ...)
	b = append(b, `","sequence_number":`...)
	b = strconv.AppendInt(b, int64(j.seq), 10)
	j.seq++
	return b
}

func appendEventEnd(b []byte) []byte { return append(b, "}\n\n"...) }

// appendItemRef appends the fields that place a text event in the output.
func (j *job) appendItemRef(b []byte) []byte {
	b = append(b, `,"item_id":"`...)
	b = j.appendResponseID(b, "msg_")
	return append(b, `","output_index":0,"content_index":0`...)
}

// appendResponsesOpening appends the events before the first token: the
// response created and in progress, the message item and its text part
// added.
func (j *job) appendResponsesOpening(b []byte) []byte {
	j.seq = 0
	for _, typ := range []string{"response.created", "response.in_progress"} {
		b = j.appendEventHead(b, typ)
		b = append(b, `,"response":`...)
		b = j.appendResponse(b, false)
		b = appendEventEnd(b)
	}
	b = j.appendEventHead(b, "response.output_item.added")
	b = append(b, `,"output_index":0,"item":`...)
	b = j.appendMessageItem(b, false)
	b = appendEventEnd(b)
	b = j.appendEventHead(b, "response.content_part.added")
	b = j.appendItemRef(b)
	b = append(b, `,"part":`...)
	b = j.appendTextPart(b, false)
	return appendEventEnd(b)
}

// appendResponsesDelta appends output token k as a text delta event.
func (j *job) appendResponsesDelta(b []byte, k int) []byte {
	b = j.appendEventHead(b, "response.output_text.delta")
	b = j.appendItemRef(b)
	b = append(b, `,"delta":"`...)
	b = append(b, words[k%len(words)]...)
	b = append(b, '"')
	return appendEventEnd(b)
}

// appendResponsesClosing appends the events after the last token: the text,
// the part and the item done, then the completed response with its usage.
// The Responses API ends its stream with these, not with [DONE].
func (j *job) appendResponsesClosing(b []byte) []byte {
	b = j.appendEventHead(b, "response.output_text.done")
	b = j.appendItemRef(b)
	b = append(b, `,"text":"`...)
	b = j.appendText(b)
	b = append(b, '"')
	b = appendEventEnd(b)
	b = j.appendEventHead(b, "response.content_part.done")
	b = j.appendItemRef(b)
	b = append(b, `,"part":`...)
	b = j.appendTextPart(b, true)
	b = appendEventEnd(b)
	b = j.appendEventHead(b, "response.output_item.done")
	b = append(b, `,"output_index":0,"item":`...)
	b = j.appendMessageItem(b, true)
	b = appendEventEnd(b)
	b = j.appendEventHead(b, "response.completed")
	b = append(b, `,"response":`...)
	b = j.appendResponse(b, true)
	return appendEventEnd(b)
}
