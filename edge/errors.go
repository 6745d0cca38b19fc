package edge

import "github.com/valyala/fasthttp"

// writeError answers in OpenAI's error shape, which every OpenAI SDK knows
// how to surface: {"error":{"message","type","param","code"}}.
func writeError(ctx *fasthttp.RequestCtx, status int, typ, code, msg string) {
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.Response.SetBodyRaw(appendErrorBody(make([]byte, 0, 128+len(msg)), typ, code, msg))
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

func badRequest(ctx *fasthttp.RequestCtx, code, msg string) {
	writeError(ctx, fasthttp.StatusBadRequest, "invalid_request_error", code, msg)
}

func noBackend(ctx *fasthttp.RequestCtx) {
	writeError(ctx, fasthttp.StatusServiceUnavailable, "service_unavailable", "no_healthy_backend",
		"no healthy backend is available; retry later")
}

func badGateway(ctx *fasthttp.RequestCtx) {
	writeError(ctx, fasthttp.StatusBadGateway, "upstream_error", "upstream_unreachable",
		"the inference backend could not be reached")
}

// backendsBusy answers when every backend tried had all its connections
// in use: an overload to retry later, not a failure.
func backendsBusy(ctx *fasthttp.RequestCtx) {
	writeError(ctx, fasthttp.StatusServiceUnavailable, "service_unavailable", "upstream_busy",
		"every connection to the inference backends is in use; retry later")
}

func gatewayTimeout(ctx *fasthttp.RequestCtx) {
	writeError(ctx, fasthttp.StatusGatewayTimeout, "upstream_error", "upstream_timeout",
		"the inference backend did not answer in time")
}

// unknownModel answers as OpenAI does for a model no backend serves.
func unknownModel(ctx *fasthttp.RequestCtx, model []byte) {
	writeError(ctx, fasthttp.StatusNotFound, "invalid_request_error", "model_not_found",
		"The model `"+string(model)+"` does not exist or no backend serves it.")
}
