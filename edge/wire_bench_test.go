package edge

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/kvca/kvca/internal/testkit"
	"github.com/valyala/fasthttp"
)

// The whole proxied request over loopback TCP: a fasthttp client, kvca
// (server, canon, chain, scheduler, upstream pool, relay) and a backend
// that answers a fixed completion, all in this process. The ns/op include
// the client's and the backend's work and the kernel's; allocs/op are the
// whole process's, so 0 means kvca's path allocates nothing either.

var (
	wireCompletion = []byte(`{"id":"cmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the wire benchmark backend, a short fixed answer."},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":12,"total_tokens":22,"prompt_tokens_details":{"cached_tokens":8}}}`)
	wireEvent      = []byte("data: {\"id\":\"cmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"token\"}}]}\n\n")
	// wireUsage is a stream's last chunk: its usage, with the cached
	// tokens the cache check reads.
	wireUsage  = []byte("data: {\"id\":\"cmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\n")
	wireDone   = []byte("data: [DONE]\n\n")
	wireModels = []byte(`{"object":"list","data":[{"id":"bench-model","object":"model"}]}`)
)

// startWireBackend serves a fixed completion, or 5 SSE events written as
// they are produced (chunked) for "?stream", without allocating.
func startWireBackend(tb testing.TB) string {
	return startWireBackendLn(tb, func(ln net.Listener) net.Listener { return ln })
}

func startWireBackendLn(tb testing.TB, wrap func(net.Listener) net.Listener) string {
	srv := &fasthttp.Server{
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
	ln := wrap(listenLocal(tb))
	serveHTTP(tb, ln, srv)
	return "http://" + ln.Addr().String()
}

// wireStream is an SSE body of five events, usage and [DONE], one Read each;
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
		return copy(p, wireUsage), nil
	case w.n == 7:
		return copy(p, wireDone), nil
	}
	return 0, io.EOF
}

func startWireProxy(tb testing.TB, backend, model string) *Server {
	cfg := DefaultConfig()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", ""
	cfg.Backends = []string{backend}
	cfg.HealthInterval = 0
	cfg.Routing.Policy = "kvca"
	if model == "epoll" {
		// As kvca serve runs the loops: with a P to spare.
		n := runtime.GOMAXPROCS(0)
		cfg.Loops = SpareP(0)
		tb.Cleanup(func() { runtime.GOMAXPROCS(n) })
	}
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return testkit.Serve(tb, s)
}

// wireClient speaks just enough HTTP/1.1 over one keep-alive connection to
// send a fixed request and read the response to its end, without
// allocating: a fasthttp client would add its own allocations (it grows a
// fresh body buffer for every chunked response) to the process's count.
type wireClient struct {
	conn net.Conn
	br   *bufio.Reader
	req  []byte
	body int // bytes of the last response body
}

func newWireClient(tb testing.TB, s *Server, path string, body []byte) *wireClient {
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	req := fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: kvca\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, len(body))
	return &wireClient{conn: conn, br: bufio.NewReaderSize(conn, 16<<10), req: append(req, body...)}
}

func (c *wireClient) do(tb testing.TB) {
	if err := c.roundTrip(); err != nil {
		tb.Fatal(err)
	}
}

func (c *wireClient) roundTrip() error {
	if _, err := c.conn.Write(c.req); err != nil {
		return err
	}
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
		return fmt.Errorf("status line %q", line)
	}
	length, chunked := -1, false
	for {
		line, err = c.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		k, v, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(":"))
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			length = 0
			for _, d := range v {
				length = length*10 + int(d-'0')
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		}
	}
	c.body = 0
	if !chunked {
		if length <= 0 {
			return fmt.Errorf("no body")
		}
		n, err := c.br.Discard(length)
		c.body = n
		return err
	}
	for {
		line, err = c.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		size := 0
		for _, d := range bytes.TrimRight(line, "\r\n") {
			switch {
			case d >= '0' && d <= '9':
				size = size*16 + int(d-'0')
			case d >= 'a' && d <= 'f':
				size = size*16 + int(d-'a'+10)
			case d >= 'A' && d <= 'F':
				size = size*16 + int(d-'A'+10)
			}
		}
		if _, err := c.br.Discard(size + 2); err != nil {
			return err
		}
		if size == 0 {
			if c.body == 0 {
				return fmt.Errorf("empty stream")
			}
			return nil
		}
		c.body += size
	}
}

// wireIOs are the I/O models this platform serves with.
func wireIOs() []string { return []string{"epoll"} }

func BenchmarkWire(b *testing.B) {
	backend := startWireBackend(b)
	names, bs := pathBodies()
	for _, model := range wireIOs() {
		s := startWireProxy(b, backend, model)
		for _, kind := range []string{"", "stream", "plainstream"} {
			path, suffix := "/v1/chat/completions", ""
			if kind != "" {
				// plainstream: the body asks for no usage, which kvca asks
				// for and removes (--stream-usage).
				path, suffix = path+"?stream", "/"+kind
			}
			for i, body := range bs {
				if kind == "plainstream" {
					body = append([]byte(`{"stream":true,`), body[1:]...)
				}
				b.Run(model+"/"+names[i]+suffix, func(b *testing.B) {
					c := newWireClient(b, s, path, body)
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
}

// TestWireNoAllocs: in steady state a proxied request allocates nothing
// anywhere in the process, streamed or not: the event loops relay chunks
// as they came.
func TestWireNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race")
	}
	backend := startWireBackend(t)
	names, bs := pathBodies()
	for _, model := range wireIOs() {
		s := startWireProxy(t, backend, model)
		// "&plain": the body streams without asking for usage, so kvca
		// asks for it and removes the usage event (--stream-usage).
		for _, path := range []string{"/v1/chat/completions", "/v1/chat/completions?stream", "/v1/chat/completions?stream&plain"} {
			for i, body := range bs {
				plain := strings.HasSuffix(path, "&plain")
				if plain {
					body = append([]byte(`{"stream":true,`), body[1:]...)
				}
				c := newWireClient(t, s, path, body)
				for range 200 {
					c.do(t)
				}
				if want := 5*len(wireEvent) + len(wireDone); plain && c.body != want {
					t.Fatalf("%s %s: %d bytes relayed, want %d: the usage event stayed", path, names[i], c.body, want)
				}
				want := 0.0
				if n := testing.AllocsPerRun(100, func() { c.do(t) }); n > want {
					t.Errorf("--io %s %s %s: %v allocs per request, want %v", model, path, names[i], n, want)
				}
			}
		}
	}
}
