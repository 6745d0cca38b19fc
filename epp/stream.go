package epp

import (
	"errors"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvca/kvca/h2grpc"
)

// errDone ends a stream whose request was answered by the picker itself:
// Envoy sends nothing more after an ImmediateResponse.
var errDone = errors.New("answered")

// open starts serving one ext_proc stream: one HTTP request and its
// response.
func (s *Server) open(out *h2grpc.Stream) h2grpc.Handler {
	// A stream's state is over a kilobyte: one from the streams that
	// ended, rather than a new one for the collector every request.
	st, _ := s.streams.Get().(*stream)
	if st == nil {
		st = new(stream)
	}
	st.out, st.proxy, st.count, st.log, st.pool = out, s.proxy, &s.count, s.cfg.Logger, &s.streams
	st.reqMode, st.respMode, st.noWait = s.cfg.RequestBodyMode, s.cfg.ResponseBodyMode, s.cfg.SendBodyWithoutWaiting
	st.maxBody, st.in.pool, st.in.arenas = s.cfg.MaxMessageBytes, &s.bodies, &s.arenas
	return st
}

// Release: the transport calls the stream no more, its end counted and
// its buffers given back (finish); the state goes back for another
// stream (h2grpc.Releaser).
func (st *stream) Release() {
	st.finish(nil) // a no-op: the stream ended before its release
	pool := st.pool
	*st = stream{}
	pool.Put(st)
}

// Message handles the stream's next message (h2grpc.Handler).
func (st *stream) Message(b []byte) error {
	return st.guard(func() error {
		// One inbound for the stream: a message decoded into it replaces,
		// never changes, what the one before held; the request body's
		// chunks go into the body's buffer (codec.go).
		if err := st.in.decode(b); err != nil {
			return status.Error(codes.InvalidArgument, "malformed ProcessingRequest: "+err.Error())
		}
		req := &st.in.req
		st.count.msgs[kindOf(req)].Add(1)
		t0 := time.Now()
		err := st.handle(req)
		st.handling += time.Since(t0)
		return err
	})
}

// CloseSend: Envoy closed its side; the stream is complete only if the
// answer was (h2grpc.Handler).
func (st *stream) CloseSend() error {
	return st.guard(func() error {
		st.end(!st.completeAtClose())
		st.close()
		return nil
	})
}

// Reset: the stream ended before its answer did (h2grpc.Handler).
func (st *stream) Reset() {
	st.guard(func() error {
		st.finish(nil) // End(true) unless the answer had ended
		return nil
	})
}

// guard runs one step of the stream and ends the stream on its error:
// errDone is the picker's own answer, complete; any other error ends the
// request cancelled and the stream with the error's status. A panic in
// the lifecycle or here ends this stream, not the process: the client
// gets a 500 if its request is still ours to answer, Envoy an Internal
// status, the lifecycle its End.
func (st *stream) guard(step func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			st.log.Error("epp: stream panicked", "panic", r, "stack", string(debug.Stack()))
			st.answerPanic()
			err = status.Error(codes.Internal, "endpoint picker: internal error")
		}
		switch {
		case err == nil:
		case err == errDone:
			st.close()
			err = nil
		default:
			st.finish(err) // the transport ends the stream with err's status
		}
	}()
	return step()
}

// close ends the stream OK.
func (st *stream) close() {
	st.finish(nil)
	st.out.Finish(nil)
}

// finish ends the request's lifecycle (End(true) unless it ended before)
// and counts the stream's end once, by how it ended.
func (st *stream) finish(err error) {
	if st.finished {
		return
	}
	st.finished = true
	st.end(true)
	how := endComplete
	switch {
	case err != nil:
		how = endError
	case st.answered:
		how = endAnswered
	case st.cancelled:
		how = endCancelled
	}
	st.count.ends[how].Add(1)
	st.count.handling.Update(st.handling.Seconds())
	// The lifecycle has ended and the answers are written: nothing holds
	// the body or the headers now.
	if st.in.pooled != nil {
		st.in.pool.put(st.in.pooled)
		st.in.pooled, st.body, st.held = nil, nil, nil
	}
	if st.in.arena != nil {
		st.reqHeaders, st.respHeaders, st.in.hand.headers = nil, nil, nil
		st.in.arenas.put(st.in.arena)
		st.in.arena = nil
	}
}

// stream is one request's state across its ext_proc messages.
type stream struct {
	out   *h2grpc.Stream
	pool  *sync.Pool // where the stream goes once released
	proxy Proxy
	count *counters
	log   *slog.Logger

	// handling is the time spent handling the stream's messages, from
	// each one's arrival to its answers sent: the picker's and the
	// lifecycle's work, not the waits for the gateway or admission.
	handling time.Duration

	reqMode, respMode BodyMode
	noWait            bool // STREAMED body sent before the headers' answer

	x         Exchange
	subset    []string
	hasSubset bool
	// reqHeaders and respHeaders are the headers given to the lifecycle:
	// fields of the stream, since a slice given as an interface would be
	// copied to the heap on every message.
	reqHeaders, respHeaders envoyHeaders

	in      inbound // the next message, as the codec decodes it
	maxBody int     // bound on a request body buffer made from Content-Length
	// body is the request body the codec put together (inbound), given
	// to the lifecycle at its end in one piece; given is how much of it
	// went to the lifecycle already.
	body  []byte
	given int

	headersAnswered bool      // the request headers' answer was sent
	bodyEnded       bool      // Body(…, true) was called
	picked          bool      // the pick was sent: the request phase is over
	held            [][]byte  // request chunks held for the answer after the pick (the messages' buffers, not copies)
	heldFirst       [2][]byte // held's first chunks, without an allocation
	trailers        bool      // request trailers came: they, not the body, end the request
	waiting         bool      // the pick waits for admission on the stream's own goroutine
	afterPick       bool      // the request trailers' answer is due once the pick is sent
	respSeen        bool      // response headers arrived
	respEnded       bool      // ResponseBody(…, true) was called
	ended           bool      // End was called
	cancelled       bool      // End was called cancelled
	answered        bool      // the picker answered the request itself
	finished        bool      // the stream's end was counted

	// ans is the headers' answer being written, its fields in arrays
	// of its own (pickAnswer).
	ans headersAnswer

	// scratch holds an answer being written: the transport copies it
	// before Send returns, and a buffer on the stack escaped to the heap
	// through the transport's writer on every answer.
	scratch [512]byte
}

// defers: the headers' answer waits for the body, which Envoy sends
// without waiting for it; the pick, made on the whole body, goes in it.
func (st *stream) defers() bool {
	return st.reqMode == ModeFullDuplex || (st.reqMode == ModeStreamed && st.noWait)
}

func (st *stream) handle(req *extprocv3.ProcessingRequest) error {
	if pc := req.GetProtocolConfig(); pc != nil {
		st.reqMode, st.respMode = pc.GetRequestBodyMode(), pc.GetResponseBodyMode()
		st.noWait = pc.GetSendBodyWithoutWaitingForHeaderResponse()
	}
	switch v := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return st.requestHeaders(v.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return st.requestBody(v.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return st.requestTrailers()
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return st.responseHeaders(v.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return st.responseBody(v.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return st.responseTrailers()
	}
	// Flow-control window updates and messages of later protocol
	// versions need no answer.
	return nil
}

func (st *stream) requestHeaders(h *extprocv3.HttpHeaders) error {
	if st.x != nil {
		return status.Error(codes.InvalidArgument, "request headers twice on one stream")
	}
	st.subset, st.hasSubset = st.in.subsetHint()
	st.reqHeaders = st.in.headers()
	hs := &st.reqHeaders
	st.x = st.proxy.Begin(hs)
	switch {
	case h.GetEndOfStream():
		return st.endBodyAndPick(nil, true)
	case st.defers():
		// The chunks are held until the pick anyway: with a length said,
		// the codec puts them together as they come.
		if n, err := strconv.Atoi(string(hs.value("content-length"))); err == nil && n > 0 && n <= st.maxBody {
			st.in.body, st.in.expect = &st.body, n
		}
		return nil
	case st.reqMode == ModeBuffered || st.reqMode == ModePartial:
		// Envoy holds the headers until the body's answer, which can
		// still change them: the pick goes there.
		st.headersAnswered = true
		return st.answerHeaders(&headersAnswer{field: fRespRequestHeaders})
	default:
		// NONE, or STREAMED with Envoy waiting for this answer before it
		// sends any body: the headers leave for the upstream with this
		// answer, so the pick is made on the headers alone.
		return st.endBodyAndPick(nil, true)
	}
}

func (st *stream) requestBody(b *extprocv3.HttpBody) error {
	if st.x == nil {
		return status.Error(codes.InvalidArgument, "request body before request headers")
	}
	if st.picked {
		st.count.bodyIn[bodyRequest].Add(uint64(len(b.GetBody())))
		// The pick was made on the headers alone (STREAMED, Envoy
		// waiting): each chunk is acknowledged as it comes.
		return st.answerHeaders(&headersAnswer{field: fRespRequestBody})
	}
	end := b.GetEndOfStream()
	if st.reqMode == ModeBuffered || st.reqMode == ModePartial {
		// One message is the whole body Envoy will send (it comes without
		// end_of_stream when trailers follow or, PARTIAL, when cut).
		end = true
	}
	st.count.bodyIn[bodyRequest].Add(uint64(len(b.GetBody())))
	if st.defers() {
		if st.held == nil {
			st.held = st.heldFirst[:0]
		}
		st.held = append(st.held, b.GetBody())
	}
	if st.in.placed && !end {
		// In the body buffer: the lifecycle takes it whole at the end.
		return nil
	}
	return st.endBodyAndPick(b.GetBody(), end)
}

func (st *stream) requestTrailers() error {
	st.trailers = true
	if st.x != nil && !st.picked {
		// Trailers end a body sent without end_of_stream.
		if err := st.endBodyAndPick(nil, true); err != nil {
			return err
		}
		if st.waiting {
			// The trailers' answer follows the pick's.
			st.afterPick = true
			return nil
		}
	}
	return st.answerTrailers()
}

func (st *stream) answerTrailers() error {
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}})
}

// endBodyAndPick gives the lifecycle a chunk and, at the end of the body,
// picks and answers: in the headers' answer when it is still due (then
// the held chunks follow), else in this body chunk's answer (BUFFERED).
func (st *stream) endBodyAndPick(chunk []byte, end bool) error {
	if !st.bodyEnded {
		if ans := st.lifecycleBody(chunk, end); ans != nil {
			return st.answer(ans)
		}
		st.bodyEnded = end
	}
	if !end {
		return nil
	}
	var subset []string
	if st.hasSubset {
		subset = st.subset
	}
	if pn, ok := st.x.(PickNower); ok {
		if eps, ans, wait := pn.PickNow(subset); !wait {
			return st.answerPick(eps, ans)
		}
	}
	// The pick waits for admission: on a goroutine of the stream's own,
	// while the connection serves its other streams. The stream's next
	// messages wait for it.
	st.waiting = true
	ctx := st.out.Context()
	st.out.Go(func() error {
		return st.guard(func() error {
			eps, ans := st.x.Pick(ctx, subset)
			st.waiting = false
			if ctx.Err() != nil {
				return nil // the stream ended: its Reset follows
			}
			t0 := time.Now()
			err := st.answerPick(eps, ans)
			if err == nil && st.afterPick {
				err = st.answerTrailers()
			}
			st.handling += time.Since(t0)
			return err
		})
	})
	return nil
}

// answerPick sends the lifecycle's pick, held to the subset hint (the
// protocol lets the picker name only endpoints of the subset, and a pick
// outside it or none at all is a 503), or its own answer.
func (st *stream) answerPick(eps []string, ans *Answer) error {
	if ans == nil && st.hasSubset {
		eps = withinSubset(eps, st.subset)
	}
	if ans == nil && len(eps) == 0 {
		ans = &Answer{Status: 503, Header: [][2]string{{"content-type", "text/plain"}}, Body: []byte("no endpoint ready\n")}
	}
	if ans != nil {
		return st.answer(ans)
	}
	dest := joinPick(eps)
	st.picked = true
	var add [][2]string
	if rh, ok := st.x.(RequestHeaderer); ok {
		add = rh.RequestHeaders()
	}
	if st.headersAnswered {
		return st.answerHeaders(pickAnswer(&st.ans, fRespRequestBody, dest, add))
	}
	st.headersAnswered = true
	if err := st.answerHeaders(pickAnswer(&st.ans, fRespRequestHeaders, dest, add)); err != nil {
		return err
	}
	return st.release()
}

// lifecycleBody gives the lifecycle the request body up to chunk. A
// chunk in the body buffer (the codec put it there) goes with the rest
// of the buffer, in one piece: the lifecycle keeps the body, and one
// piece of the whole body's length is one copy where chunk by chunk its
// buffer grew and was copied again several times. A body over the
// lifecycle's limit is then answered at its end (the buffer is bounded,
// inbound), not at the chunk that crosses the limit. A chunk elsewhere
// follows what the buffer holds, and the buffer takes no more.
func (st *stream) lifecycleBody(chunk []byte, end bool) *Answer {
	if end {
		st.in.body = nil // nothing follows an end
	}
	if st.in.placed {
		whole := st.body[st.given:]
		st.given = len(st.body)
		return st.x.Body(whole, end)
	}
	st.in.body = nil
	if st.given < len(st.body) {
		held := st.body[st.given:]
		st.given = len(st.body)
		if ans := st.x.Body(held, false); ans != nil {
			return ans
		}
	}
	return st.x.Body(chunk, end)
}

// release answers the request chunks held for the pick. In
// FULL_DUPLEX_STREAMED Envoy forwards only the body the picker streams
// back, so each chunk goes back as it came (end of stream on the last
// only when no trailers follow), or the whole body in pieces when the
// codec put it together; in STREAMED each chunk gets its answer.
func (st *stream) release() error {
	held := st.held
	st.held = nil
	total := 0
	for _, c := range held {
		total += len(c)
	}
	if st.reqMode == ModeFullDuplex && total > 0 && total == len(st.body) {
		// Every chunk is in the body buffer, one after the other: the
		// body goes back in as few pieces as Envoy takes, not cut where
		// the chunks came (a 64 KiB chunk was two pieces).
		return splitChunk(st.body, !st.trailers, func(p []byte, e bool) error {
			return st.sendBody(bodyRequest, p, e)
		})
	}
	for i, c := range held {
		last := i == len(held)-1
		if st.reqMode != ModeFullDuplex {
			if err := st.answerHeaders(&headersAnswer{field: fRespRequestBody}); err != nil {
				return err
			}
			continue
		}
		if err := splitChunk(c, last && !st.trailers, func(p []byte, e bool) error {
			return st.sendBody(bodyRequest, p, e)
		}); err != nil {
			return err
		}
	}
	return nil
}

// answer sends the lifecycle's own answer as Envoy's local reply: the
// request is complete.
func (st *stream) answer(a *Answer) error {
	st.picked = true
	st.answered = true
	if err := st.send(immediate(a)); err != nil {
		return err
	}
	st.end(false)
	return errDone
}

func (st *stream) responseHeaders(h *extprocv3.HttpHeaders) error {
	a := headersAnswer{field: fRespResponseHeaders}
	if st.x != nil && st.picked && !st.ended {
		st.respHeaders = st.in.headers()
		hs := &st.respHeaders
		code, _ := strconv.Atoi(string(hs.value(":status")))
		served := st.in.served()
		if served == "" {
			served = hs.get(ServedKey)
		}
		st.respSeen = true
		a.set = lowerNames(st.x.Response(code, served, hs))
	}
	if err := st.answerHeaders(&a); err != nil {
		return err
	}
	if h.GetEndOfStream() {
		st.endResponse()
	}
	return nil
}

func (st *stream) responseBody(b *extprocv3.HttpBody) error {
	end := b.GetEndOfStream() || st.respMode == ModeBuffered || st.respMode == ModePartial
	st.count.bodyIn[bodyResponse].Add(uint64(len(b.GetBody())))
	if st.respSeen && !st.respEnded {
		st.x.ResponseBody(b.GetBody(), end)
		st.respEnded = end
	}
	if st.respMode == ModeFullDuplex {
		// Envoy forwards to the client only what comes back.
		if err := splitChunk(b.GetBody(), b.GetEndOfStream(), func(p []byte, e bool) error {
			return st.sendBody(bodyResponse, p, e)
		}); err != nil {
			return err
		}
	} else if err := st.answerHeaders(&headersAnswer{field: fRespResponseBody}); err != nil {
		return err
	}
	if end {
		st.end(false)
	}
	return nil
}

func (st *stream) responseTrailers() error {
	st.endResponse()
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}})
}

// endResponse: the answer is complete (headers with end of stream, or
// trailers after the last body chunk).
func (st *stream) endResponse() {
	if st.respSeen && !st.respEnded {
		st.x.ResponseBody(nil, true)
		st.respEnded = true
	}
	st.end(false)
}

// completeAtClose tells whether a stream Envoy closes without a
// cancellation had its answer complete: Envoy sends no response body
// when its mode is NONE, so there the headers were the end.
func (st *stream) completeAtClose() bool {
	if st.respSeen && st.respMode == ModeNone && !st.respEnded {
		st.x.ResponseBody(nil, true)
		st.respEnded = true
		return true
	}
	return st.respEnded
}

// end calls Exchange.End exactly once, whichever way the stream ends.
func (st *stream) end(cancelled bool) {
	if st.x == nil || st.ended {
		return
	}
	st.ended = true
	st.cancelled = cancelled
	st.x.End(cancelled)
}

// answerPanic tells the client of an internal error when its request is
// still the picker's to answer; best effort, the stream may be gone.
func (st *stream) answerPanic() {
	if st.x == nil || st.picked {
		return
	}
	st.picked = true
	defer func() { _ = recover() }()
	_ = st.send(immediate(&Answer{Status: 500, Body: []byte("endpoint picker: internal error\n")}))
}

func (st *stream) send(r *extprocv3.ProcessingResponse) error {
	st.count.sent[sentKind(r)].Add(1)
	return st.write(r)
}

func (st *stream) write(m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return status.Error(codes.Internal, "endpoint picker: "+err.Error())
	}
	return st.out.Send(b)
}

// answerHeaders sends an answer that sets headers, or says nothing,
// written by hand (codec.go).
func (st *stream) answerHeaders(a *headersAnswer) error {
	st.count.sent[sentOfField(a.field)].Add(1)
	return st.out.Send(a.appendTo(st.scratch[:0]))
}

// sendBody streams a body chunk back to the gateway (FULL_DUPLEX_STREAMED),
// the chunk framed, not copied (codec.go).
func (st *stream) sendBody(body int, chunk []byte, end bool) error {
	kind := sentRequestBody
	if body == bodyResponse {
		kind = sentResponseBody
	}
	st.count.sent[kind].Add(1)
	st.count.bodyOut[body].Add(uint64(len(chunk)))
	sb := streamedBody{response: body == bodyResponse, body: chunk, end: end}
	head, tail := sb.frame(st.scratch[:])
	return st.out.Send(head, chunk, tail)
}
