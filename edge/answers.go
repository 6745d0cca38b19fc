package edge

import (
	"strconv"

	"github.com/kvca/kvca/h1"
)

// reply is one of kvca's own error answers, in OpenAI's error shape,
// which every OpenAI SDK knows how to surface:
// {"error":{"message","type","param","code"}}.
type reply struct {
	status    int
	typ, code string
	msg       string
	header    string // extra header lines, each ending in CRLF
	close     bool   // the connection ends after it
	body      string // the whole body, when not built from typ, code and msg
}

var (
	replyNoBackend  = reply{status: 503, typ: "service_unavailable", code: "no_healthy_backend", msg: "no healthy backend is available; retry later", header: "Retry-After: 1\r\n"}
	replyBusy       = reply{status: 503, typ: "service_unavailable", code: "upstream_busy", msg: "every connection to the inference backends is in use; retry later", header: "Retry-After: 1\r\n"}
	replyBadGateway = reply{status: 502, typ: "upstream_error", code: "upstream_unreachable", msg: "the inference backend could not be reached"}
	replyTimeout    = reply{status: 504, typ: "upstream_error", code: "upstream_timeout", msg: "the inference backend did not answer in time"}
	replyBadAnswer  = reply{status: 502, typ: "upstream_error", code: "upstream_bad_response", msg: "the inference backend sent a malformed answer"}
	replyReadTime   = reply{status: 408, typ: "invalid_request_error", code: "request_timeout", msg: "request was not received in time", close: true}
	replyNotFound   = reply{status: 404, typ: "invalid_request_error", code: "not_found", msg: "unknown path"}
	replyTooLarge   = reply{status: 413, typ: "invalid_request_error", code: "request_too_large", close: true}
	replyMethod     = reply{status: 501, typ: "invalid_request_error", code: "not_implemented", msg: "method not implemented"}
)

// methodNotAllowed answers a method the path does not serve, naming the
// ones it does (RFC 9110 §15.5.6).
func methodNotAllowed(allow string) reply {
	return reply{status: 405, typ: "invalid_request_error", code: "method_not_allowed",
		msg: "use " + allow, header: "Allow: " + allow + "\r\n"}
}

// refused turns an acceptance-policy refusal into its answer; the
// connection always closes after it.
func refused(e *h1.Error) reply {
	return reply{status: e.Status, typ: "invalid_request_error", code: e.Code, msg: e.Msg, close: true}
}

// unknownModel answers as OpenAI does for a model no backend serves.
func unknownModel(model []byte) reply {
	return reply{status: 404, typ: "invalid_request_error", code: "model_not_found",
		msg: "The model `" + string(model) + "` does not exist or no backend serves it."}
}

func badBody(code, msg string) reply {
	return reply{status: 400, typ: "invalid_request_error", code: code, msg: msg}
}

func tooLarge(max int) reply {
	r := replyTooLarge
	r.msg = "request body exceeds " + strconv.Itoa(max) + " bytes"
	return r
}

// appendJSONString quotes s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// appendErrorBody appends kvca's error body in OpenAI's shape.
func appendErrorBody(b []byte, typ, code, msg string) []byte {
	b = append(b, `{"error":{"message":`...)
	b = appendJSONString(b, msg)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"param":null,"code":`...)
	b = appendJSONString(b, code)
	return append(b, "}}\n"...)
}

// appendAnswer appends a whole answer of kvca's own: status line,
// Content-Type, Content-Length, the request id, extra header lines, and
// the body unless the request was HEAD.
func appendAnswer(b []byte, status int, ctype string, body []byte, rid []byte, header string, close, head bool) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = append(b, statusText(status)...)
	b = append(b, "\r\nContent-Type: "...)
	b = append(b, ctype...)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n"...)
	if len(rid) > 0 {
		b = append(b, "X-Request-Id: "...)
		b = append(b, rid...)
		b = append(b, "\r\n"...)
	}
	b = append(b, header...)
	if close {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	if !head {
		b = append(b, body...)
	}
	return b
}

// appendErrorAnswer appends r as a whole answer, in Anthropic's error
// shape for the Messages API (anthropic), else OpenAI's.
func appendErrorAnswer(b []byte, r *reply, rid []byte, close, head, anthropic bool) []byte {
	if r.body != "" {
		return appendAnswer(b, r.status, "application/json", []byte(r.body), rid, r.header, close, head)
	}
	var body [512]byte
	return appendAnswer(b, r.status, "application/json", r.appendBody(body[:0], anthropic), rid, r.header, close, head)
}

// appendBody appends the error's JSON body, in Anthropic's shape for the
// Messages API, else OpenAI's.
func (r *reply) appendBody(b []byte, anthropic bool) []byte {
	switch {
	case r.body != "":
		return append(b, r.body...)
	case anthropic:
		return appendAnthropicError(b, anthropicType(r.status), r.msg)
	}
	return appendErrorBody(b, r.typ, r.code, r.msg)
}

// appendAnthropicError appends an error in Anthropic's shape:
// {"type":"error","error":{"type":...,"message":...}}.
func appendAnthropicError(b []byte, typ, msg string) []byte {
	b = append(b, `{"type":"error","error":{"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, msg)
	return append(b, "}}\n"...)
}

// anthropicType is the Anthropic error type of a status.
func anthropicType(status int) string {
	switch status {
	case 400, 405, 408, 411, 417, 431, 501, 505:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 503:
		return "overloaded_error"
	}
	return "api_error"
}

// statusText is the reason phrase kvca writes for its own answers.
func statusText(code int) string {
	switch code {
	case 100:
		return "Continue"
	case 200:
		return "OK"
	case 204:
		return "No Content"
	case 400:
		return "Bad Request"
	case 401:
		return "Unauthorized"
	case 404:
		return "Not Found"
	case 405:
		return "Method Not Allowed"
	case 408:
		return "Request Timeout"
	case 413:
		return "Content Too Large"
	case 417:
		return "Expectation Failed"
	case 429:
		return "Too Many Requests"
	case 431:
		return "Request Header Fields Too Large"
	case 500:
		return "Internal Server Error"
	case 501:
		return "Not Implemented"
	case 502:
		return "Bad Gateway"
	case 503:
		return "Service Unavailable"
	case 504:
		return "Gateway Timeout"
	case 505:
		return "HTTP Version Not Supported"
	}
	return "Unknown"
}

// sseBrokenEvent ends a stream that broke off after it began: a client
// must never take a cut stream for a clean end.
var sseBrokenEvent = []byte("event: error\ndata: {\"error\":{\"message\":\"the inference backend failed mid-stream\",\"type\":\"upstream_error\",\"param\":null,\"code\":\"upstream_stream_broken\"}}\n\n")

// anthropicBrokenEvent and anthropicShutdownEvent are the same for the
// Messages API, in Anthropic's stream error event.
var (
	anthropicBrokenEvent   = []byte("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the inference backend failed mid-stream\"}}\n\n")
	anthropicShutdownEvent = []byte("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"the proxy is shutting down; the stream was cut\"}}\n\n")
)

// sseShutdownEvent ends a stream cut because kvca's shutdown ran out of
// time.
var sseShutdownEvent = []byte("event: error\ndata: {\"error\":{\"message\":\"the proxy is shutting down; the stream was cut\",\"type\":\"server_error\",\"param\":null,\"code\":\"proxy_shutdown\"}}\n\n")
