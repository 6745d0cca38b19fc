package edge

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// testBackend is a minimal OpenAI-compatible server on loopback that
// records what it receives and can stream under the test's control.
type testBackend struct {
	t      *testing.T
	name   string
	ln     net.Listener
	srv    *fasthttp.Server
	mu     sync.Mutex
	bodies [][]byte
	hdrs   []string
	hits   atomic.Int64

	// gate, when set, makes streaming wait before each event after the
	// first until the test sends on it.
	gate   chan struct{}
	events int
	// holdFirst, when set, makes a stream send its headers at once and its
	// first event only after the test sends on it (a prefilling engine).
	holdFirst chan struct{}
	// hold, when set, holds back every answer until it is closed (for
	// 10 s at most): a request the test keeps in flight.
	hold chan struct{}
	// status, when non-zero, is returned instead of a completion.
	status atomic.Int32
	// delay, when set, is how long each answer takes (an engine's work).
	delay time.Duration
	// cached, when set, is the prompt_tokens_details.cached_tokens a
	// non-streamed answer reports for its request's body.
	cached func(body []byte) int
}

func newTestBackend(t *testing.T, name string) *testBackend {
	t.Helper()
	return newTestBackendOn(t, name, listenLocal(t))
}

// newTestBackendOn is newTestBackend serving on ln (a TLS listener, or
// one on another loopback address).
func newTestBackendOn(t *testing.T, name string, ln net.Listener) *testBackend {
	t.Helper()
	b := &testBackend{t: t, name: name, ln: ln, events: 3}
	b.srv = &fasthttp.Server{Handler: b.handle}
	serveHTTP(t, ln, b.srv)
	return b
}

// serveHTTP serves srv on ln until the test ends.
func serveHTTP(tb testing.TB, ln net.Listener, srv *fasthttp.Server) {
	srv.CloseOnShutdown = true
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { stopHTTP(srv, ln) })
}

func stopHTTP(srv *fasthttp.Server, ln net.Listener) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.ShutdownWithContext(ctx)
	_ = ln.Close() // Shutdown is a no-op if Serve has not started yet
}

// holdAnswers holds back every answer until release (or the test's
// end): requests the test keeps in flight. Call it before any request.
func (b *testBackend) holdAnswers(t *testing.T) (release func()) {
	b.hold = make(chan struct{})
	release = sync.OnceFunc(func() { close(b.hold) })
	t.Cleanup(release)
	return release
}

func (b *testBackend) url() string { return "http://" + b.ln.Addr().String() }

// close stops the backend before the test ends: a backend gone.
func (b *testBackend) close() { stopHTTP(b.srv, b.ln) }

// lastHeaders is the head of the last request the backend counted.
func (b *testBackend) lastHeaders() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.hdrs) == 0 {
		return ""
	}
	return b.hdrs[len(b.hdrs)-1]
}

func (b *testBackend) received() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([][]byte(nil), b.bodies...)
}

func (b *testBackend) handle(ctx *fasthttp.RequestCtx) {
	switch string(ctx.Path()) {
	case "/health":
		ctx.SetBodyString("ok")
		return
	case "/v1/models":
		ctx.SetContentType("application/json")
		fmt.Fprintf(ctx, `{"object":"list","data":[{"id":"m","object":"model"},{"id":"only-%s","object":"model"}]}`, b.name)
		return
	}
	b.hits.Add(1)
	b.mu.Lock()
	b.bodies = append(b.bodies, append([]byte(nil), ctx.PostBody()...))
	b.hdrs = append(b.hdrs, ctx.Request.Header.String())
	b.mu.Unlock()
	if b.hold != nil {
		select {
		case <-b.hold:
		case <-time.After(10 * time.Second):
		}
	}
	if st := b.status.Load(); st != 0 {
		ctx.SetStatusCode(int(st))
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"error":{"message":"backend says no","type":"server_error","param":null,"code":"x"}}`)
		return
	}
	if b.delay > 0 {
		time.Sleep(b.delay)
	}
	stream := fastjson.GetBool(ctx.PostBody(), "stream")
	ctx.Response.Header.Set("X-Backend", b.name)
	if !stream {
		ctx.SetContentType("application/json")
		prompt, details := 10, ""
		if b.cached != nil {
			// About four bytes a token, as the calibration assumes.
			prompt = len(ctx.PostBody()) / 4
			details = fmt.Sprintf(`,"prompt_tokens_details":{"cached_tokens":%d}`, b.cached(ctx.PostBody()))
		}
		fmt.Fprintf(ctx, `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello from %s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":3,"total_tokens":13%s}}`, b.name, prompt, details)
		return
	}
	ctx.SetContentType("text/event-stream")
	gate, events, hold := b.gate, b.events, b.holdFirst
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		if hold != nil {
			_ = w.Flush()
			select {
			case <-hold:
			case <-time.After(10 * time.Second):
				return
			}
		}
		for i := 0; i < events; i++ {
			if i > 0 && gate != nil {
				select {
				case <-gate:
				case <-time.After(10 * time.Second):
					return
				}
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"}}],\"backend\":%q}\n\n", i, b.name)
			if err := w.Flush(); err != nil {
				return
			}
		}
		fmt.Fprintf(w, "data: [DONE]\n\n")
		_ = w.Flush()
	})
}
