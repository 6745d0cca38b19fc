//go:build linux

package edge

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// The forwarding rules, checked on the bytes each side receives.

func chatReq(extra string) string {
	body := conversation(1, 0, false)
	return fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: client.example\r\n%sContent-Length: %d\r\n\r\n%s", extra, len(body), body)
}

// TestForwardHost: the backend gets its own authority as Host, or the
// client's with PreserveHost (its own again when the client sent none).
func TestForwardHost(t *testing.T) {
	t.Parallel()
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			for _, preserve := range []bool{false, true} {
				t.Run(fmt.Sprint("preserve=", preserve), func(t *testing.T) {
					t.Parallel()
					b := newRawBackend(t, nil)
					_, d := startRawProxy(t, m, nil, func(c *Config) { c.Backends = []string{b.url("")}; c.PreserveHost = preserve })
					for _, tc := range []struct{ req, client string }{
						{chatReq(""), "client.example"},
						{"GET /v1/files HTTP/1.1\r\nHost: client.example:8443\r\n\r\n", "client.example:8443"},
						{"GET /v1/files HTTP/1.0\r\n\r\n", ""},
					} {
						c := d.dial(t)
						c.send(tc.req)
						up := b.next(t)
						if r := c.read(false); r.status != 200 {
							t.Fatalf("status %d", r.status)
						}
						want := b.authority()
						if preserve && tc.client != "" {
							want = tc.client
						}
						if h := up.fields("Host"); len(h) != 1 || h[0] != want {
							t.Fatalf("preserve=%v %q: backend got Host %q, want %q", preserve, up.line(), h, want)
						}
					}
				})
			}
		})
	}
}

// TestForwardPathPrefix: a backend URL's path goes before the request's
// path, on routed and passthrough routes alike.
func TestForwardPathPrefix(t *testing.T) {
	t.Parallel()
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			for _, path := range []string{"/engine1", "/engine1/", "/engine1/v1"} {
				t.Run(path, func(t *testing.T) {
					t.Parallel()
					b := newRawBackend(t, nil)
					_, d := startRawProxy(t, m, nil, func(c *Config) { c.Backends = []string{b.url(path)} })
					for _, tc := range []struct{ req, line string }{
						{chatReq(""), "POST /engine1/v1/chat/completions HTTP/1.1"},
						{"GET /v1/files/f-1?purpose=batch HTTP/1.1\r\nHost: x\r\n\r\n", "GET /engine1/v1/files/f-1?purpose=batch HTTP/1.1"},
						{"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "POST /engine1/v1/embeddings HTTP/1.1"},
						{"GET http://other.example/v1/files HTTP/1.1\r\nHost: x\r\n\r\n", "GET /engine1/v1/files HTTP/1.1"},
						{"GET /v1/files HTTP/1.0\r\n\r\n", "GET /engine1/v1/files HTTP/1.1"},
					} {
						c := d.dial(t)
						c.send(tc.req)
						up := b.next(t)
						if r := c.read(false); r.status != 200 {
							t.Fatalf("status %d", r.status)
						}
						if up.line() != tc.line {
							t.Fatalf("backend %s: got %q, want %q", path, up.line(), tc.line)
						}
					}
				})
			}
		})
	}
}

// TestForwardXFF: every client X-Forwarded-For (and -Proto) field is
// merged in order into one, and the peer (the scheme) comes last.
func TestForwardXFF(t *testing.T) {
	t.Parallel()
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			scheme := "http"
			if m.tls {
				scheme = "https"
			}
			b := newRawBackend(t, nil)
			_, d := startRawProxy(t, m, nil, func(c *Config) { c.Backends = []string{b.url("")} })
			for _, tc := range []struct{ name, fields, xff, xfp string }{
				{"none", "", "127.0.0.1", scheme},
				{"one each", "X-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\n", "10.0.0.1, 127.0.0.1", "https, " + scheme},
				{"two fields each", "X-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\nx-forwarded-for: 10.0.0.2, 10.0.0.3\r\nX-FORWARDED-PROTO: http\r\n",
					"10.0.0.1, 10.0.0.2, 10.0.0.3, 127.0.0.1", "https, http, " + scheme},
				{"fields apart", "X-Forwarded-For: 10.0.0.1\r\nX-Other: a\r\nX-Forwarded-For: 10.0.0.2\r\n", "10.0.0.1, 10.0.0.2, 127.0.0.1", scheme},
				{"an empty field", "X-Forwarded-For:\r\nX-Forwarded-For: 10.0.0.2\r\n", "10.0.0.2, 127.0.0.1", scheme},
			} {
				for _, req := range []string{chatReq(tc.fields), "GET /v1/files HTTP/1.1\r\nHost: x\r\n" + tc.fields + "\r\n"} {
					c := d.dial(t)
					c.send(req)
					up := b.next(t)
					if r := c.read(false); r.status != 200 {
						t.Fatalf("%s: status %d", tc.name, r.status)
					}
					if got := up.fields("X-Forwarded-For"); len(got) != 1 || got[0] != tc.xff {
						t.Fatalf("%s: X-Forwarded-For %q, want %q", tc.name, got, tc.xff)
					}
					if got := up.fields("X-Forwarded-Proto"); len(got) != 1 || got[0] != tc.xfp {
						t.Fatalf("%s: X-Forwarded-Proto %q, want %q", tc.name, got, tc.xfp)
					}
				}
			}
		})
	}
}

// TestForwardHopByHop: hop-by-hop fields and every field the Connection
// header names stay on their hop, both ways; the fields kvca writes
// itself survive a Connection header that names them.
func TestForwardHopByHop(t *testing.T) {
	t.Parallel()
	const answer = "HTTP/1.1 200 OK\r\nConnection: X-Internal, keep-alive\r\nX-Internal: 1\r\nKeep-Alive: timeout=5\r\n" +
		"Proxy-Authenticate: Basic\r\nProxy-Connection: keep-alive\r\nUpgrade: h2c\r\nTrailer: X-T\r\nTE: trailers\r\n" +
		"x-internal: 2\r\nX-End: yes\r\nContent-Length: 2\r\n\r\n{}"
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := newRawBackend(t, func(rawReq) rawAnswer { return rawAnswer{resp: answer} })
			_, d := startRawProxy(t, m, nil, func(c *Config) { c.Backends = []string{b.url("")} })
			hop := "Connection: keep-alive, X-Secret\r\nconnection: x-other\r\nX-Secret: 1\r\nX-Other: 2\r\nKeep-Alive: timeout=5\r\n" +
				"Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\nTE: trailers\r\nTrailer: X-T\r\nUpgrade: h2c\r\nX-Kept: yes\r\n"
			for _, tc := range []struct {
				name, req string
				names     []string // the field names the backend gets
			}{
				{"passthrough", "GET /v1/files HTTP/1.1\r\nHost: x\r\n" + hop + "\r\n",
					[]string{"Host", "X-Kept", "X-Forwarded-For", "X-Forwarded-Proto", "X-Request-Id"}},
				{"routed", chatReq(hop),
					[]string{"Host", "X-Kept", "Content-Length", "X-Forwarded-For", "X-Forwarded-Proto", "X-Request-Id"}},
				// A client naming the fields kvca writes cannot have them
				// dropped.
				{"naming kvca's fields", chatReq("Connection: Host, X-Forwarded-For, X-Request-Id, Content-Length, X-Forwarded-Proto\r\nX-Request-Id: named\r\n"),
					[]string{"Host", "Content-Length", "X-Forwarded-For", "X-Forwarded-Proto", "X-Request-Id"}},
			} {
				c := d.dial(t)
				c.send(tc.req)
				up := b.next(t)
				r := c.read(false)
				if r.status != 200 || string(r.body) != "{}" {
					t.Fatalf("%s: status %d %q", tc.name, r.status, r.body)
				}
				if got := up.names(); !slices.Equal(sorted(got), sorted(tc.names)) {
					t.Fatalf("%s: backend got fields %q, want %q", tc.name, got, tc.names)
				}
				if tc.name != "passthrough" {
					if cl := up.fields("Content-Length"); len(cl) != 1 || cl[0] != fmt.Sprint(len(up.body)) {
						t.Fatalf("%s: Content-Length %q for %d bytes", tc.name, cl, len(up.body))
					}
				}
				if got, want := r.fieldNames(), []string{"Content-Length", "X-End", "X-Request-Id"}; !slices.Equal(sorted(got), want) {
					t.Fatalf("%s: client got fields %q, want %q", tc.name, got, want)
				}
				c.open()
			}
		})
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func (r rawResp) fieldNames() []string { return headNames(r.head) }

// TestForwardChunkedUpload: a chunked upload reaches the backend decoded,
// with a Content-Length of its data and none of its framing or trailer.
func TestForwardChunkedUpload(t *testing.T) {
	t.Parallel()
	body := conversation(3, 1, false)
	cut := len(body) / 3
	chunked := fmt.Sprintf("%x\r\n%s\r\n%X;name=val\r\n%s\r\n%x\r\n%s\r\n0\r\nX-Trailer: t\r\n\r\n",
		cut, body[:cut], cut, body[cut:2*cut], len(body)-2*cut, body[2*cut:])
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := newRawBackend(t, nil)
			_, d := startRawProxy(t, m, nil, func(c *Config) { c.Backends = []string{b.url("")} })
			for _, path := range []string{"/v1/chat/completions", "/v1/embeddings"} {
				c := d.dial(t)
				c.send("POST " + path + " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: X-Trailer\r\n\r\n")
				// In pieces that split the framing anywhere.
				for i := 0; i < len(chunked); i += 7 {
					c.send(chunked[i:min(i+7, len(chunked))])
				}
				up := b.next(t)
				if r := c.read(false); r.status != 200 {
					t.Fatalf("%s: status %d", path, r.status)
				}
				if string(up.body) != body {
					t.Fatalf("%s: backend got body %q, want %q", path, up.body, body)
				}
				if cl := up.fields("Content-Length"); len(cl) != 1 || cl[0] != fmt.Sprint(len(body)) {
					t.Fatalf("%s: Content-Length %q, want %d", path, cl, len(body))
				}
				for _, f := range []string{"Transfer-Encoding", "Trailer", "X-Trailer"} {
					if up.fields(f) != nil {
						t.Fatalf("%s: %s reached the backend: %q", path, f, up.head)
					}
				}
				c.open()
			}
		})
	}
}

// TestForwardExpectContinue: kvca answers 100 Continue itself before the
// client sends its body, and the backend gets no Expect.
func TestForwardExpectContinue(t *testing.T) {
	t.Parallel()
	body := conversation(4, 0, false)
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := newRawBackend(t, nil)
			_, d := startRawProxy(t, m, nil, func(c *Config) { c.Backends = []string{b.url("")} })
			for _, tc := range []struct{ head, body string }{
				{fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(body)), body},
				{"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nTransfer-Encoding: chunked\r\n\r\n",
					fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)},
			} {
				c := d.dial(t)
				c.send(tc.head)
				if r := c.read(false); r.status != 100 || r.head != "HTTP/1.1 100 Continue\r\n\r\n" {
					t.Fatalf("before the body: %q", r.head)
				}
				b.none(t)
				c.send(tc.body)
				up := b.next(t)
				if r := c.read(false); r.status != 200 {
					t.Fatalf("status %d", r.status)
				}
				if up.fields("Expect") != nil || string(up.body) != body {
					t.Fatalf("backend got %q with %d bytes", up.head, len(up.body))
				}
				c.open()
			}
		})
	}
}

// TestForwardHTTP10Dechunked: an HTTP/1.0 client gets a chunked answer's
// data without its framing, delimited by the connection's close.
func TestForwardHTTP10Dechunked(t *testing.T) {
	t.Parallel()
	const answer = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nX-T: 1\r\n\r\n"
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := newRawBackend(t, func(rawReq) rawAnswer { return rawAnswer{resp: answer} })
			_, d := startRawProxy(t, m, nil, func(c *Config) { c.Backends = []string{b.url("")} })
			for _, req := range []string{
				"GET /v1/files HTTP/1.0\r\n\r\n",
				"GET /v1/files HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
				chatReq("")[:len("POST /v1/chat/completions HTTP/1.")] + "0" + chatReq("")[len("POST /v1/chat/completions HTTP/1.1"):],
			} {
				c := d.dial(t)
				c.send(req)
				up := b.next(t)
				if !strings.HasSuffix(up.line(), " HTTP/1.1") {
					t.Fatalf("request line upstream %q", up.line())
				}
				r := c.read(false)
				if r.status != 200 || string(r.raw) != "hello world" {
					t.Fatalf("status %d, body %q", r.status, r.raw)
				}
				if r.field("Transfer-Encoding") != "" || r.field("Content-Length") != "" || r.field("Connection") != "close" || r.field("X-T") != "" {
					t.Fatalf("head %q", r.head)
				}
				c.closed()
			}
		})
	}
}

// TestForwardHEAD: answers to HEAD carry no body, whatever their framing
// fields say (a Transfer-Encoding may be dropped: kvca frames what it
// relays), and the connection goes on serving.
func TestForwardHEAD(t *testing.T) {
	t.Parallel()
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			answers := []string{
				"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n",
				"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
				"HTTP/1.1 404 Not Found\r\nContent-Length: 7\r\n\r\n",
			}
			var i atomic.Int32
			b := newRawBackend(t, func(rawReq) rawAnswer { return rawAnswer{resp: answers[int(i.Add(1)-1)%len(answers)]} })
			_, d := startRawProxy(t, m, nil, func(c *Config) { c.Backends = []string{b.url("")} })
			c := d.dial(t)
			for k, want := range []struct {
				status int
				field  string
			}{{200, "Content-Length"}, {200, ""}, {404, "Content-Length"}} {
				c.send("HEAD /v1/files HTTP/1.1\r\nHost: x\r\n\r\n")
				up := b.next(t)
				if up.line() != "HEAD /v1/files HTTP/1.1" {
					t.Fatalf("upstream %q", up.line())
				}
				r := c.read(true)
				if r.status != want.status || (want.field != "" && r.field(want.field) == "") {
					t.Fatalf("answer %d: %q", k, r.head)
				}
			}
			// Nothing followed the heads: the next answer is the next request's.
			c.open()
			for _, p := range []string{"/v1/models", "/v1/models/m", "/ready", "/nope"} {
				c.send("HEAD " + p + " HTTP/1.1\r\nHost: x\r\n\r\n")
				if r := c.read(true); r.field("Content-Length") == "" || r.field("Content-Length") == "0" {
					t.Fatalf("HEAD %s: %q", p, r.head)
				}
				c.open()
			}
		})
	}
}

// TestPipelinedFraming: requests pipelined in one write behind bodies of
// each framing reach the backend as separate requests, each body exactly
// its framing's worth, so no byte of one request can pass as another's.
func TestPipelinedFraming(t *testing.T) {
	t.Parallel()
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := newRawBackend(t, nil)
			_, d := startRawProxy(t, m, nil, func(c *Config) { c.Backends = []string{b.url("")} })
			c := d.dial(t)
			c.send("POST /v1/embeddings?n=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}" +
				"POST /v1/embeddings?n=2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n[1]\r\n0\r\n\r\n" +
				"GET /v1/files?n=3 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n" +
				"POST /v1/embeddings?n=4 HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n\r\nGET /v1/files?n=5 HTTP/1.1\r\n\r\n" +
				"GET /v1/files?n=6 HTTP/1.1\r\nHost: x\r\n\r\n")
			// The framing kvca writes: a Content-Length for every body, an
			// empty one included, and none where the client sent none.
			for i, want := range []struct{ line, body, cl string }{
				{"POST /v1/embeddings?n=1 HTTP/1.1", "{}", "2"},
				{"POST /v1/embeddings?n=2 HTTP/1.1", "[1]", "3"},
				{"GET /v1/files?n=3 HTTP/1.1", "", "0"},
				{"POST /v1/embeddings?n=4 HTTP/1.1", "GET /v1/files?n=5 HTTP/1.1\r\n\r\n", "30"},
				{"GET /v1/files?n=6 HTTP/1.1", "", ""},
			} {
				up := b.next(t)
				if up.line() != want.line || string(up.body) != want.body {
					t.Fatalf("request %d: backend got %q with body %q, want %q with %q", i, up.line(), up.body, want.line, want.body)
				}
				if cl := strings.Join(up.fields("Content-Length"), ","); cl != want.cl || len(up.fields("Transfer-Encoding")) != 0 {
					t.Fatalf("request %d: Content-Length %q, want %q, in %q", i, cl, want.cl, up.head)
				}
				if r := c.read(false); r.status != 200 {
					t.Fatalf("answer %d: %d", i, r.status)
				}
			}
			c.open()
			b.none(t)
		})
	}
}
