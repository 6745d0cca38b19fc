package mock

import (
	"bufio"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// job is one generation request, pooled with its buffers.
type job struct {
	e            *Engine
	api          api
	chat         bool // api == apiChat
	responses    bool // api == apiResponses
	seq          int  // next Responses event's sequence_number
	stream       bool
	usage        bool
	model        string
	maxTokens    int
	promptTokens int
	cached       int
	noCache      bool  // fast mode: no prefix cache, so no cached-token count either
	kvBlocks     int64 // KV blocks held while running (kv_cache_usage_perc)
	id           uint64
	created      int64
	arrived      time.Time
	firstAt      time.Time
	killAfter    int
	conn         net.Conn
	prompt       []byte
	hashes       []uint64
	out          []byte
	timer        *time.Timer
	firstTok     time.Time // when the first token came (firstAt moves with preemptions)
	slot         *seqSlot
	prio         int64 // the request's `priority` (0: none)
	streamFn     func(w *bufio.Writer)
	// Responses API: the request's previous_response_id (echoed), whether
	// to store the answer; Messages API: the tool the answer calls ("": it
	// answers text).
	prevID []byte
	store  bool
	tool   []byte
	respID []byte
	// A disaggregated fleet's legs (vLLM's kv_transfer_params): a prefill
	// for a remote decode answers one token and the transfer; a decode of
	// a remote prefill reads the KV cache it lacks instead of computing it.
	remoteDecode, remotePrefill bool
}

// api is the request family an engine answers.
type api uint8

const (
	apiChat api = iota
	apiCompletions
	apiMessages
	apiResponses
)

func apiOf(path string) api {
	switch path {
	case PathCompletions:
		return apiCompletions
	case PathMessages:
		return apiMessages
	case PathResponses:
		return apiResponses
	}
	return apiChat
}

// Handler serves the engine's HTTP API: /v1/chat/completions,
// /v1/completions, /v1/responses, /v1/messages (Anthropic), /v1/models,
// /health, /metrics.
func (e *Engine) Handler(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	switch string(path) {
	case PathChat, PathCompletions, PathResponses, PathMessages:
		if !ctx.IsPost() {
			ctx.Response.Header.Set("Allow", "POST")
			e.failAPI(ctx, apiOf(string(path)), fasthttp.StatusMethodNotAllowed, "MethodNotAllowed", "", "use POST")
			return
		}
		e.complete(ctx, string(path))
	case "/health", "/ping":
		ctx.SetStatusCode(fasthttp.StatusOK)
	case "/v1/models":
		ctx.SetContentType("application/json")
		ctx.SetBody(e.modelsJSON)
	case "/metrics":
		ctx.SetContentType("text/plain; version=0.0.4")
		e.set.WritePrometheus(ctx)
	default:
		e.fail(ctx, fasthttp.StatusNotFound, "NotFoundError", "", "no such route")
	}
}

func (e *Engine) complete(ctx *fasthttp.RequestCtx, path string) {
	chat, responses := path == PathChat, path == PathResponses
	a := apiOf(path)
	f := e.faults.Load()
	arrived := time.Now()
	if f.SlowStart > 0 {
		time.Sleep(f.SlowStart)
	}
	body := ctx.PostBody()
	if e.cfg.RecordBodies {
		b := append([]byte(nil), body...)
		e.bodiesMu.Lock()
		e.bodies = append(e.bodies, b)
		e.bodiesMu.Unlock()
	}
	p, _ := e.parsers.Get().(*fastjson.Parser)
	if p == nil {
		p = new(fastjson.Parser)
	}
	defer e.parsers.Put(p)
	v, err := p.ParseBytes(body)
	if err != nil {
		e.badRequestAPI(ctx, a, "", "invalid JSON body: "+err.Error())
		return
	}
	if v.Type() != fastjson.TypeObject {
		e.badRequestAPI(ctx, a, "", "request body must be a JSON object")
		return
	}
	model, ok := e.model(v.Get("model"))
	if !ok {
		e.badRequests.Add(1)
		e.failAPI(ctx, a, fasthttp.StatusNotFound, "NotFoundError", "model", "the model does not exist")
		return
	}
	stream, err := optBool(v.Get("stream"))
	if err != nil {
		e.badRequestAPI(ctx, a, "stream", "stream must be a boolean")
		return
	}
	usage, err := optBool(v.Get("stream_options", "include_usage"))
	if err != nil {
		e.badRequestAPI(ctx, a, "stream_options", "stream_options.include_usage must be a boolean")
		return
	}
	maxTokens, param, err := e.maxTokensOf(a, v)
	if err != nil {
		e.badRequestAPI(ctx, a, param, err.Error())
		return
	}
	remoteDecode, remotePrefill := false, false
	if kv := v.Get("kv_transfer_params"); kv != nil && kv.Type() == fastjson.TypeObject {
		remoteDecode, remotePrefill = kv.GetBool("do_remote_decode"), kv.GetBool("do_remote_prefill")
	}
	if remoteDecode && stream {
		e.badRequestAPI(ctx, a, "stream", "a prefill for a remote decode does not stream")
		return
	}
	var prio int64
	if pv := v.Get("priority"); pv != nil {
		if prio, err = pv.Int64(); err != nil {
			e.badRequestAPI(ctx, a, "priority", "priority must be an integer")
			return
		}
	}
	if e.cfg.Fast && a != apiMessages {
		if f.ErrorRate > 0 && rand.Float64() < f.ErrorRate {
			e.errors.Add(1)
			e.fail(ctx, fasthttp.StatusInternalServerError, "InternalServerError", "", "mock: injected failure")
			return
		}
		e.requests.Add(1)
		e.fast.write(ctx, path, stream, usage)
		return
	}

	j, _ := e.jobs.Get().(*job)
	if j == nil {
		j = &job{e: e, slot: newSeqSlot()}
		j.streamFn = j.streamTo
	}
	j.prevID, j.tool, j.store = j.prevID[:0], j.tool[:0], false
	switch a {
	case apiChat:
		j.prompt, err = renderChat(j.prompt[:0], v)
	case apiResponses:
		j.prompt, err = e.renderThread(j, v)
	case apiMessages:
		j.prompt, err = renderMessages(j.prompt[:0], v)
		if err == nil {
			j.tool = toolChoice(j.tool, v)
		}
	default:
		j.prompt, err = renderCompletion(j.prompt[:0], v)
	}
	if err != nil {
		e.jobs.Put(j)
		re, _ := err.(*requestError)
		if re == nil {
			re = &requestError{msg: err.Error()}
		}
		if re.status != 0 {
			e.badRequests.Add(1)
			e.failCode(ctx, a, re.status, "invalid_request_error", re.param, re.code, re.msg)
			return
		}
		e.badRequestAPI(ctx, a, re.param, re.msg)
		return
	}
	if f.ErrorRate > 0 && rand.Float64() < f.ErrorRate {
		e.jobs.Put(j)
		e.errors.Add(1)
		e.failAPI(ctx, a, fasthttp.StatusInternalServerError, "InternalServerError", "", "mock: injected failure")
		return
	}
	e.requests.Add(1)

	j.api, j.chat, j.responses, j.stream, j.usage, j.model, j.maxTokens = a, chat, responses, stream, usage, model, maxTokens
	j.hashes = BlockHashes(j.hashes[:0], j.prompt, e.cfg.BlockTokens)
	j.promptTokens = Tokens(j.prompt)
	j.cached = 0
	j.id = e.nextID.Add(1)
	j.created = arrived.Unix()
	j.arrived = arrived
	j.killAfter = f.KillAfterChunks
	j.prio = prio
	j.remoteDecode, j.remotePrefill = remoteDecode, remotePrefill
	j.conn = ctx.Conn()

	if stream && j.killAfter > 0 {
		// fasthttp streams through a pipe, so closing the socket from the
		// stream writer could drop events still in flight; a hijacked
		// connection is written synchronously and cut exactly after K events.
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(j.hijackStream)
		return
	}
	if stream {
		ctx.SetContentType("text/event-stream")
		ctx.Response.Header.Set("Cache-Control", "no-cache")
		// A real server sends headers at once and the first event after prefill.
		ctx.Response.ImmediateHeaderFlush = true
		ctx.SetBodyStreamWriter(j.streamFn)
		return
	}
	e.respond(ctx, j)
}

// respond runs a non-streaming request to completion and writes its JSON.
func (e *Engine) respond(ctx *fasthttp.RequestCtx, j *job) {
	defer e.release(j)
	if !j.admit() {
		e.failAPI(ctx, j.api, fasthttp.StatusServiceUnavailable, "ServiceUnavailable", "", "engine shutting down")
		return
	}
	defer e.sched.release(j.slot)
	if !j.waitToken(j.maxTokens - 1) {
		e.failAPI(ctx, j.api, fasthttp.StatusServiceUnavailable, "ServiceUnavailable", "", "engine shutting down")
		return
	}
	e.mTTFT.Update(j.firstTok.Sub(j.arrived).Seconds())
	e.outTokens.Add(uint64(j.maxTokens))
	e.mGen.Add(j.maxTokens)
	e.mSuccess.Inc()
	j.finished()
	j.out = j.appendAnswer(j.out[:0])
	if j.remoteDecode && len(j.out) > 0 && j.out[len(j.out)-1] == '}' {
		j.out = j.appendTransfer(j.out[:len(j.out)-1], ctx.LocalAddr())
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(j.out)
}

// streamTo writes the SSE stream; it runs after the handler returned.
func (j *job) streamTo(w *bufio.Writer) {
	defer j.e.release(j)
	j.run(w)
}

const hijackHeader = "HTTP/1.1 200 OK\r\nServer: kvca-mock\r\nContent-Type: text/event-stream\r\n" +
	"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"

// hijackStream writes the HTTP response and chunked SSE stream by hand.
func (j *job) hijackStream(c net.Conn) {
	defer j.e.release(j)
	j.conn = c
	if _, err := io.WriteString(c, hijackHeader); err != nil {
		return
	}
	w := bufio.NewWriterSize(chunkWriter{c}, 16<<10)
	if j.run(w) {
		io.WriteString(c, "0\r\n\r\n")
	}
}

// chunkWriter frames every write as one HTTP chunk.
type chunkWriter struct{ w io.Writer }

func (c chunkWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var hdr [20]byte
	h := strconv.AppendInt(hdr[:0], int64(len(p)), 16)
	h = append(h, '\r', '\n')
	if _, err := c.w.Write(h); err != nil {
		return 0, err
	}
	if _, err := c.w.Write(p); err != nil {
		return 0, err
	}
	_, err := io.WriteString(c.w, "\r\n")
	return len(p), err
}

// run runs the sequence and writes its events, reporting whether the
// stream ended normally.
func (j *job) run(w *bufio.Writer) bool {
	e := j.e
	if !j.admit() {
		return false
	}
	done := false
	defer func() {
		if !done {
			e.sched.release(j.slot)
		}
	}()
	if !j.waitToken(0) {
		return false
	}
	e.mTTFT.Update(time.Since(j.arrived).Seconds())
	events := 0
	// Events due at the same time (the role and the first token, or tokens
	// overdue after a late wake-up) share one flush; every other event is
	// flushed when it is due.
	emit := func(flush bool) bool {
		w.Write(j.out)
		events++
		kill := j.killAfter > 0 && events >= j.killAfter
		if (flush || kill) && w.Flush() != nil {
			return false
		}
		if kill {
			e.killed.Add(1)
			j.conn.Close()
			return false
		}
		return true
	}
	if j.out = j.appendOpening(j.out[:0]); len(j.out) > 0 {
		if !emit(false) {
			return false
		}
	}
	dec := e.scale(e.cfg.DecodePerToken)
	for k := 0; k < j.maxTokens; k++ {
		if k > 0 && !j.waitToken(k) {
			return false
		}
		j.out = j.appendToken(j.out[:0], k)
		e.outTokens.Add(1)
		e.mGen.Inc()
		// The last token goes out with the end of the stream below.
		last := k == j.maxTokens-1
		if !emit(!last && time.Until(j.firstAt.Add(time.Duration(k+1)*dec)) > 0) {
			return false
		}
	}
	done = true
	e.sched.release(j.slot)
	e.mSuccess.Inc()
	j.finished()
	j.out = j.appendClosing(j.out[:0])
	w.Write(j.out)
	return w.Flush() == nil
}

func (e *Engine) release(j *job) {
	if j.kvBlocks > 0 {
		e.kvUsed.Add(-j.kvBlocks)
		j.kvBlocks = 0
	}
	j.conn = nil
	if cap(j.prompt) > 1<<20 {
		j.prompt = nil // do not pin huge prompts in the pool
	}
	e.jobs.Put(j)
}

// admit queues the sequence for a slot, then, as vLLM's scheduler does at
// admission, looks its prefix up in the cache, caches its blocks and books
// its prefill. It returns false if the engine closed meanwhile.
func (j *job) admit() bool {
	e := j.e
	e.sched.arrive(j.slot, j.prio)
	if !e.sched.acquire(j.slot, e.quit) {
		return false
	}
	var end time.Time
	j.cached, end = j.prefill(0)
	j.kvBlocks = int64((j.promptTokens + j.maxTokens + e.cfg.BlockTokens - 1) / e.cfg.BlockTokens)
	e.kvUsed.Add(j.kvBlocks)
	e.queryTokens.Add(uint64(j.promptTokens))
	e.hitTokens.Add(uint64(j.cached))
	e.mQueries.Add(j.promptTokens)
	e.mHit.Add(j.cached)
	e.mPrompt.Add(j.promptTokens)
	j.firstAt, j.firstTok = end, end
	return true
}

// prefill looks the prompt up in the cache, caches its blocks, and books
// the prefill of what the cache lacks of it plus extra tokens (those a
// preempted sequence had generated). It returns the cached tokens and
// when the prefill ends.
func (j *job) prefill(extra int) (cached int, end time.Time) {
	e := j.e
	bt := e.cfg.BlockTokens
	// vLLM always computes the last prompt token, so a fully cached prompt
	// still misses its last block.
	e.cacheMu.Lock()
	cached = e.cache.match(j.hashes, (j.promptTokens-1)/bt) * bt
	e.cache.insert(j.hashes)
	e.cacheMu.Unlock()
	d := e.scale(e.cfg.PrefillOverhead + time.Duration(j.promptTokens-cached+extra)*e.cfg.PrefillPerToken)
	if j.remotePrefill && extra == 0 {
		// The prefill worker computed the prompt: what this engine lacks
		// of it is read from there.
		d = e.scale(time.Duration(j.promptTokens-cached) * e.cfg.TransferPerToken)
	}
	return cached, e.sched.reservePrefill(j.slot, time.Now(), d)
}

// waitToken waits until output token k (0: the first) is due; false if
// the engine closed first. A sequence preempted meanwhile waits for a slot
// again, then recomputes what its cache lacks of its prompt and every
// token it generated, as a preempted sequence's KV is freed, and goes on
// from where it was.
func (j *job) waitToken(k int) bool {
	e := j.e
	dec := e.scale(e.cfg.DecodePerToken)
	for {
		switch j.sleepUntil(j.firstAt.Add(time.Duration(k) * dec)) {
		case slept:
			return true
		case closed:
			return false
		case moved:
			// Its prefill, not begun, moved on the lane (a higher
			// priority went ahead, or a preempted one left).
			// The first token moves with it unless it came before a
			// preemption (then firstTok is earlier than firstAt).
			d := e.sched.moved(j.slot)
			if j.firstTok.Equal(j.firstAt) {
				j.firstTok = j.firstTok.Add(d)
			}
			j.firstAt = j.firstAt.Add(d)
			continue
		}
		now := time.Now()
		done := 0 // tokens generated before the preemption
		if !now.Before(j.firstAt) {
			done = min(k, int(now.Sub(j.firstAt)/dec)+1)
		}
		e.mPreempt.Inc()
		if !e.sched.acquire(j.slot, e.quit) {
			return false
		}
		_, at := j.prefill(done)
		j.firstAt = at.Add(-time.Duration(done) * dec) // token done is due at the end of the recompute
		if done == 0 {
			j.firstTok = at
		}
	}
}

// Outcomes of sleepUntil.
const (
	slept = iota
	closed
	preempted
	moved
)

// sleepUntil waits for t, the engine's close, or the sequence's
// preemption, whichever comes first.
func (j *job) sleepUntil(t time.Time) int {
	e := j.e
	if d := time.Until(t); d > 0 {
		if j.timer == nil {
			j.timer = time.NewTimer(d)
		} else {
			j.timer.Reset(d)
		}
		select {
		case <-j.timer.C:
		case <-e.quit:
			j.timer.Stop()
			return closed
		case <-j.slot.preempt:
			j.timer.Stop()
			return preempted
		case <-j.slot.moved:
			j.timer.Stop()
			return moved
		}
	}
	select {
	case <-e.quit:
		return closed
	case <-j.slot.preempt:
		return preempted
	default:
		return slept
	}
}

func (e *Engine) model(v *fastjson.Value) (string, bool) {
	if v == nil || v.Type() == fastjson.TypeNull {
		return e.cfg.Models[0], true
	}
	b, err := v.StringBytes()
	if err != nil {
		return "", false
	}
	for _, m := range e.cfg.Models {
		if m == string(b) {
			return m, true
		}
	}
	return "", false
}

func (e *Engine) maxTokens(v *fastjson.Value, responses bool) (int, string, error) {
	if responses {
		return e.maxTokensOf(apiResponses, v)
	}
	return e.maxTokensOf(apiChat, v)
}

// maxTokensOf reads the output limit under the API's own name; the
// Messages API requires it, as Anthropic's does.
func (e *Engine) maxTokensOf(a api, v *fastjson.Value) (int, string, error) {
	param := "max_completion_tokens"
	switch a {
	case apiResponses:
		param = "max_output_tokens"
	case apiMessages:
		param = "max_tokens"
	}
	mt := v.Get(param)
	if a <= apiCompletions && (mt == nil || mt.Type() == fastjson.TypeNull) {
		param = "max_tokens"
		mt = v.Get(param)
	}
	if mt == nil || mt.Type() == fastjson.TypeNull {
		if a == apiMessages {
			return 0, param, badParam(param, "max_tokens: Field required")
		}
		return e.cfg.DefaultMaxTokens, "", nil
	}
	n, err := mt.Int()
	if err != nil || n < 1 {
		return 0, param, badParam(param, param+" must be a positive integer")
	}
	return n, "", nil
}

func optBool(v *fastjson.Value) (bool, error) {
	if v == nil {
		return false, nil
	}
	switch v.Type() {
	case fastjson.TypeTrue:
		return true, nil
	case fastjson.TypeFalse, fastjson.TypeNull:
		return false, nil
	}
	return false, errBadRequest
}

func (e *Engine) badRequest(ctx *fasthttp.RequestCtx, param, msg string) {
	e.badRequests.Add(1)
	e.fail(ctx, fasthttp.StatusBadRequest, "BadRequestError", param, msg)
}

// fail writes an OpenAI-shaped error.
func (e *Engine) fail(ctx *fasthttp.RequestCtx, status int, typ, param, msg string) {
	b := append(make([]byte, 0, 128+len(msg)), `{"error":{"message":`...)
	b = appendJSONString(b, msg)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"param":`...)
	if param == "" {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, param)
	}
	b = append(b, `,"code":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, "}}"...)
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// appendTransfer closes a prefill answer with the kv_transfer_params a
// vLLM prefill worker gives its decode worker: this engine, the prompt's
// blocks, where to read them.
func (j *job) appendTransfer(b []byte, local net.Addr) []byte {
	host, port := "127.0.0.1", 0
	if a, ok := local.(*net.TCPAddr); ok {
		host, port = a.IP.String(), a.Port
	}
	b = append(b, `,"kv_transfer_params":{"do_remote_decode":false,"do_remote_prefill":true,"remote_engine_id":`...)
	b = appendJSONString(b, j.e.cfg.Name)
	b = append(b, `,"remote_block_ids":[`...)
	for i := range j.hashes {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(i), 10)
	}
	b = append(b, `],"remote_host":`...)
	b = appendJSONString(b, host)
	b = append(b, `,"remote_port":`...)
	b = strconv.AppendInt(b, int64(port), 10)
	return append(b, "}}"...)
}
