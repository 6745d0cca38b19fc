package mock

import "github.com/valyala/fasthttp"

// fastResponses are built once so that fast mode answers without allocating:
// it measures the proxy in front, not the engine.
type fastResponses struct {
	chat, chatStream, chatStreamUsage []byte
	cmpl, cmplStream, cmplStreamUsage []byte
	resp, respStream                  []byte
}

func buildFastResponses(model string) fastResponses {
	var r fastResponses
	j := &job{e: &Engine{idPrefix: "fast-"}, model: model, maxTokens: 4, promptTokens: 8, id: 1, noCache: true}
	for _, chat := range []bool{true, false} {
		j.chat = chat
		body := j.appendCompletion(nil)
		var stream []byte
		if chat {
			stream = j.appendChunk(stream, -1)
		}
		for k := 0; k < j.maxTokens; k++ {
			stream = j.appendChunk(stream, k)
		}
		withUsage := append(j.appendUsageChunk(append([]byte(nil), stream...)), "data: [DONE]\n\n"...)
		stream = append(stream, "data: [DONE]\n\n"...)
		if chat {
			r.chat, r.chatStream, r.chatStreamUsage = body, stream, withUsage
		} else {
			r.cmpl, r.cmplStream, r.cmplStreamUsage = body, stream, withUsage
		}
	}
	j.chat, j.responses = false, true
	r.resp = j.appendResponse(nil, true)
	r.respStream = j.appendResponsesOpening(nil)
	for k := 0; k < j.maxTokens; k++ {
		r.respStream = j.appendResponsesDelta(r.respStream, k)
	}
	r.respStream = j.appendResponsesClosing(r.respStream)
	return r
}

func (r *fastResponses) write(ctx *fasthttp.RequestCtx, path string, stream, usage bool) {
	var b []byte
	chat := path == PathChat
	switch {
	case path == PathResponses && stream:
		b = r.respStream
	case path == PathResponses:
		b = r.resp
	case chat && !stream:
		b = r.chat
	case chat && usage:
		b = r.chatStreamUsage
	case chat:
		b = r.chatStream
	case !stream:
		b = r.cmpl
	case usage:
		b = r.cmplStreamUsage
	default:
		b = r.cmplStream
	}
	if stream {
		ctx.SetContentType("text/event-stream")
	} else {
		ctx.SetContentType("application/json")
	}
	ctx.Response.SetBodyRaw(b)
}
