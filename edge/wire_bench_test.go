package edge

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// The whole proxied request over loopback TCP: a fasthttp client, kvca
// (server, canon, chain, scheduler, upstream pool, relay) and a backend
// that answers a fixed completion, all in this process. The ns/op include
// the client's and the backend's work and the kernel's; allocs/op are the
// whole process's, so 0 means kvca's path allocates nothing either.

var (
	wireCompletion = []byte(`{"id":"cmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the wire benchmark backend, a short fixed answer."},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":12,"total_tokens":22}}`)
	wireEvent      = []byte("data: {\"id\":\"cmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"token\"}}]}\n\n")
	wireDone       = []byte("data: [DONE]\n\n")
	wireModels     = []byte(`{"object":"list","data":[{"id":"bench-model","object":"model"}]}`)
)

// startWireBackend serves a fixed completion, or 5 SSE events written as
// they are produced (chunked) for "?stream", without allocating.
func startWireBackend(tb testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &fasthttp.Server{
		CloseOnShutdown: true,
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("application/json")
			if string(ctx.Path()) == "/v1/models" {
				ctx.Response.SetBodyRaw(wireModels)
				return
			}
			if !ctx.QueryArgs().Has("stream") {
				ctx.Response.SetBodyRaw(wireCompletion)
				return
			}
			ctx.SetContentType("text/event-stream")
			w, _ := wireStreams.Get().(*wireStream)
			if w == nil {
				w = &wireStream{}
			}
			w.n = 0
			ctx.SetBodyStream(w, -1)
		},
	}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// wireStream is an SSE body of five events and [DONE], one Read each;
// fasthttp closes it when the response is written, which pools it.
type wireStream struct{ n int }

var wireStreams sync.Pool

func (w *wireStream) Close() error {
	wireStreams.Put(w)
	return nil
}

func (w *wireStream) Read(p []byte) (int, error) {
	w.n++
	switch {
	case w.n <= 5:
		return copy(p, wireEvent), nil
	case w.n == 6:
		return copy(p, wireDone), nil
	}
	return 0, io.EOF
}

func startWireProxy(tb testing.TB, backend string) *Server {
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Backends = []string{backend}
	cfg.HealthInterval = 0
	cfg.Policy = "kvca"
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}

type wireClient struct {
	hc   *fasthttp.HostClient
	req  *fasthttp.Request
	resp *fasthttp.Response
}

func newWireClient(s *Server, path string, body []byte) *wireClient {
	c := &wireClient{
		hc:   &fasthttp.HostClient{Addr: s.Addr(), MaxConns: 1},
		req:  fasthttp.AcquireRequest(),
		resp: fasthttp.AcquireResponse(),
	}
	c.req.Header.SetMethod("POST")
	c.req.SetRequestURI("http://" + s.Addr() + path)
	c.req.Header.SetContentType("application/json")
	c.req.SetBodyRaw(body)
	return c
}

func (c *wireClient) do(tb testing.TB) {
	if err := c.hc.Do(c.req, c.resp); err != nil {
		tb.Fatal(err)
	}
	if c.resp.StatusCode() != fasthttp.StatusOK || len(c.resp.Body()) == 0 {
		tb.Fatalf("status %d, body %q", c.resp.StatusCode(), c.resp.Body())
	}
}

func BenchmarkWire(b *testing.B) {
	s := startWireProxy(b, startWireBackend(b))
	names, bs := pathBodies()
	for _, stream := range []bool{false, true} {
		path := "/v1/chat/completions"
		suffix := ""
		if stream {
			path += "?stream"
			suffix = "/stream"
		}
		for i, body := range bs {
			b.Run(names[i]+suffix, func(b *testing.B) {
				c := newWireClient(s, path, body)
				c.do(b)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					c.do(b)
				}
			})
		}
	}
}

// TestWireNoAllocs: in steady state a proxied request allocates nothing
// anywhere in the process. A streamed (chunked) one allocates once, in
// fasthttp: writeBodyChunked's chunk-framing writer escapes to the heap
// when the body is relayed with WriteTo. Taking fasthttp's Read path
// instead would avoid it at the price of one more copy of every chunk.
func TestWireNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race")
	}
	s := startWireProxy(t, startWireBackend(t))
	names, bs := pathBodies()
	for _, path := range []string{"/v1/chat/completions", "/v1/chat/completions?stream"} {
		for i, body := range bs {
			c := newWireClient(s, path, body)
			for range 200 {
				c.do(t)
			}
			want := 0.0
			if strings.HasSuffix(path, "?stream") {
				want = 1
			}
			if n := testing.AllocsPerRun(100, func() { c.do(t) }); n > want {
				t.Errorf("%s %s: %v allocs per request, want %v", path, names[i], n, want)
			}
		}
	}
}
