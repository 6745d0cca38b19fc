package edge

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestHopHeadersStripped: hop-by-hop headers, in any case, go neither to
// the backend nor back to the client; end-to-end ones pass both ways.
func TestHopHeadersStripped(t *testing.T) {
	t.Parallel()
	hop := []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Upgrade"}
	for _, withHop := range []bool{true, false} {
		got := make(chan string, 1)
		srv := &fasthttp.Server{DisableHeaderNamesNormalizing: true, Handler: func(ctx *fasthttp.RequestCtx) {
			switch string(ctx.Path()) {
			case "/health":
				return
			case "/v1/models":
				ctx.SetContentType("application/json")
				ctx.SetBodyString(`{"object":"list","data":[{"id":"m","object":"model"}]}`)
				return
			}
			got <- ctx.Request.Header.String()
			if withHop {
				ctx.Response.Header.Set("keep-alive", "timeout=5")
				ctx.Response.Header.Set("Proxy-Authenticate", "Basic")
				ctx.Response.Header.Set("UPGRADE", "h2c")
			}
			ctx.Response.Header.Set("X-End-To-End", "yes")
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"id":"c1","object":"chat.completion","choices":[]}`)
		}}
		ln := listenLocal(t)
		serveHTTP(t, ln, srv)
		s := startProxy(t, func(c *Config) { c.Backends = []string{"http://" + ln.Addr().String()} })

		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
		extra := ""
		if withHop {
			extra = "connection: keep-alive\r\nKEEP-ALIVE: timeout=9\r\nProxy-Authorization: Basic eA==\r\nte: trailers\r\nProxy-Connection: keep-alive\r\n"
		}
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n%sX-Client: 1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", extra, len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		conn.Close()
		up := strings.ToLower(<-got)
		if !strings.Contains(up, "x-client: 1") {
			t.Errorf("end-to-end request header lost: %q", up)
		}
		for _, h := range hop {
			if strings.Contains(up, "\n"+strings.ToLower(h)+":") {
				t.Errorf("withHop=%v: %s reached the backend: %q", withHop, h, up)
			}
			if h != "Connection" && resp.Header.Get(h) != "" {
				t.Errorf("withHop=%v: %s reached the client: %v", withHop, h, resp.Header)
			}
		}
		if resp.Header.Get("X-End-To-End") != "yes" {
			t.Errorf("end-to-end response header lost: %v", resp.Header)
		}
	}
}

// A client's "Connection: close" is stripped from the upstream request but
// still honoured on the client's own connection: kvca closes it after the
// response.
func TestClientConnectionCloseHonoured(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	s := startProxy(t, nil, b)
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := conversation(1, 0, false)
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("status %d, close %v", resp.StatusCode, resp.Close)
	}
	b.mu.Lock()
	h := b.hdrs[0]
	b.mu.Unlock()
	if strings.Contains(strings.ToLower(h), "connection: close") {
		t.Fatalf("Connection: close reached the backend: %q", h)
	}
	waitIdle(t, s)
}
