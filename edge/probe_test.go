//go:build linux

package edge

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvca/kvca/internal/testkit"
)

// What a refused or answered probe does to its connection.
const (
	closes = iota + 1 // the answer says Connection: close, and the connection ends
	stays             // the connection serves the next request
)

// probe is one request kvca answers itself, never forwarding it.
type probe struct {
	name   string
	req    string
	status int
	conn   int
	allow  string // the Allow of a 405
	head   bool   // a HEAD request
}

const passAllow = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"

func acceptanceProbes() []probe {
	long := strings.Repeat("a", 17<<10)
	fields := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "X-F%d: v\r\n", i)
		}
		return b.String()
	}
	return []probe{
		// Line ends.
		{name: "bare LF ends every line", req: "GET /health HTTP/1.1\nHost: x\n\n", status: 400, conn: closes},
		{name: "bare LF ends a field", req: "GET /health HTTP/1.1\r\nHost: x\nX: b\r\n\r\n", status: 400, conn: closes},
		{name: "bare LF ends the head", req: "GET /health HTTP/1.1\r\nHost: x\r\n\n", status: 400, conn: closes},
		{name: "bare CR ends the request line", req: "GET /health HTTP/1.1\rHost: x\r\n\r\n", status: 400, conn: closes},
		{name: "bare CR in a value", req: "GET /health HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n", status: 400, conn: closes},
		// No blank line follows: the answer must come at once, not when
		// the (hour-long) header timeout ends.
		{name: "bare CR, head not ended", req: "GET /health HTTP/1.1\r\nHost: x\r\nX: a\rb", status: 400, conn: closes},
		{name: "bare CR in the target", req: "GET /health\r HTTP/1.1\r\nHost: x\r\n\r\n", status: 400, conn: closes},
		{name: "obs-fold with a space", req: "GET /health HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", status: 400, conn: closes},
		{name: "obs-fold with a tab", req: "GET /health HTTP/1.1\r\nHost: x\r\nX: a\r\n\tb\r\n\r\n", status: 400, conn: closes},
		// Control bytes.
		{name: "NUL in a value", req: "GET /health HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n", status: 400, conn: closes},
		{name: "NUL in a value, head not ended", req: "GET /health HTTP/1.1\r\nHost: x\r\nX: a\x00", status: 400, conn: closes},
		{name: "SOH in a value", req: "GET /health HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n", status: 400, conn: closes},
		{name: "ESC in a value", req: "GET /health HTTP/1.1\r\nHost: x\r\nX: a\x1b[0mb\r\n\r\n", status: 400, conn: closes},
		{name: "DEL in a value", req: "GET /health HTTP/1.1\r\nHost: x\r\nX: a\x7fb\r\n\r\n", status: 400, conn: closes},
		{name: "NUL in the target", req: "GET /hea\x00lth HTTP/1.1\r\nHost: x\r\n\r\n", status: 400, conn: closes},
		{name: "SOH in the target", req: "GET /v1/files\x01 HTTP/1.1\r\nHost: x\r\n\r\n", status: 400, conn: closes},
		{name: "DEL in the target", req: "GET /v1/files\x7f HTTP/1.1\r\nHost: x\r\n\r\n", status: 400, conn: closes},
		{name: "tab in the target", req: "GET /v1/fi\tles HTTP/1.1\r\nHost: x\r\n\r\n", status: 400, conn: closes},
		{name: "NUL in the method", req: "G\x00T /health HTTP/1.1\r\nHost: x\r\n\r\n", status: 400, conn: closes},
		// Request line and target.
		{name: "space in the target", req: "GET /v1/a b HTTP/1.1\r\nHost: x\r\n\r\n", status: 400, conn: closes},
		{name: "space before the method", req: " GET /health HTTP/1.1\r\nHost: x\r\n\r\n", status: 400, conn: closes},
		{name: "fragment in the target", req: "GET /health#x HTTP/1.1\r\nHost: x\r\n\r\n", status: 400, conn: closes},
		{name: "asterisk with GET", req: "GET * HTTP/1.1\r\nHost: x\r\n\r\n", status: 400, conn: closes},
		{name: "absolute form, other scheme", req: "GET ftp://x/health HTTP/1.1\r\nHost: x\r\n\r\n", status: 400, conn: closes},
		{name: "absolute form with userinfo", req: "GET http://u@x/v1/files HTTP/1.1\r\nHost: x\r\n\r\n", status: 400, conn: closes},
		{name: "lower-case version", req: "GET /health http/1.1\r\nHost: x\r\n\r\n", status: 400, conn: closes},
		// Field names.
		{name: "space in a name", req: "GET /health HTTP/1.1\r\nHost: x\r\nX Y: b\r\n\r\n", status: 400, conn: closes},
		{name: "space before the colon", req: "GET /health HTTP/1.1\r\nHost: x\r\nX-A : b\r\n\r\n", status: 400, conn: closes},
		{name: "tab before the colon", req: "GET /health HTTP/1.1\r\nHost: x\r\nX-A\t: b\r\n\r\n", status: 400, conn: closes},
		{name: "empty name", req: "GET /health HTTP/1.1\r\nHost: x\r\n: b\r\n\r\n", status: 400, conn: closes},
		{name: "name not a token", req: "GET /health HTTP/1.1\r\nHost: x\r\nX(Y): b\r\n\r\n", status: 400, conn: closes},
		{name: "line without a colon", req: "GET /health HTTP/1.1\r\nHost: x\r\nbroken\r\n\r\n", status: 400, conn: closes},
		// Host.
		{name: "missing Host", req: "GET /health HTTP/1.1\r\n\r\n", status: 400, conn: closes},
		{name: "two Hosts", req: "GET /health HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n", status: 400, conn: closes},
		{name: "empty Host", req: "GET /health HTTP/1.1\r\nHost:\r\n\r\n", status: 400, conn: closes},
		{name: "two Hosts differing", req: "GET /health HTTP/1.1\r\nHost: x\r\nhost: y\r\n\r\n", status: 400, conn: closes},
		{name: "Host with a space", req: "GET /health HTTP/1.1\r\nHost: a b\r\n\r\n", status: 400, conn: closes},
		{name: "Host with a slash", req: "GET /health HTTP/1.1\r\nHost: a/b\r\n\r\n", status: 400, conn: closes},
		{name: "Host with userinfo", req: "GET /health HTTP/1.1\r\nHost: u@a\r\n\r\n", status: 400, conn: closes},
		// Framing.
		{name: "Content-Length and chunked", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400, conn: closes},
		{name: "chunked and Content-Length", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", status: 400, conn: closes},
		{name: "two Content-Lengths", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", status: 400, conn: closes},
		{name: "Content-Length list", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 2, 2\r\n\r\n{}", status: 400, conn: closes},
		{name: "signed Content-Length", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: +2\r\n\r\n{}", status: 400, conn: closes},
		{name: "negative Content-Length", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", status: 400, conn: closes},
		{name: "hex Content-Length", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 0x2\r\n\r\n{}", status: 400, conn: closes},
		{name: "16-digit Content-Length", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000000\r\n\r\n", status: 400, conn: closes},
		{name: "chunked not last", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", status: 400, conn: closes},
		{name: "gzip alone", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", status: 400, conn: closes},
		{name: "identity", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n", status: 400, conn: closes},
		{name: "chunked twice", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400, conn: closes},
		{name: "chunked in HTTP/1.0", req: "POST /v1/embeddings HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400, conn: closes},
		{name: "gzip then chunked", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", status: 501, conn: closes},
		{name: "deflate then chunked", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: deflate\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 501, conn: closes},
		{name: "malformed chunk size", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", status: 400, conn: closes},
		{name: "chunk without its CRLF", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n", status: 400, conn: closes},
		// Versions.
		{name: "HTTP/1.2", req: "GET /health HTTP/1.2\r\nHost: x\r\n\r\n", status: 505, conn: closes},
		{name: "HTTP/2.0", req: "GET /health HTTP/2.0\r\nHost: x\r\n\r\n", status: 505, conn: closes},
		{name: "HTTP/2 preface", req: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", status: 505, conn: closes},
		{name: "HTTP/0.9", req: "GET /health HTTP/0.9\r\n\r\n", status: 505, conn: closes},
		{name: "HTTP/3.0", req: "GET /health HTTP/3.0\r\nHost: x\r\n\r\n", status: 505, conn: closes},
		// Sizes.
		{name: "head over 16 KB", req: "GET /health HTTP/1.1\r\nHost: x\r\nX-Long: " + long + "\r\n\r\n", status: 431, conn: closes},
		{name: "target over 16 KB", req: "GET /v1/" + long + " HTTP/1.1\r\nHost: x\r\n\r\n", status: 431, conn: closes},
		{name: "101 fields", req: "GET /health HTTP/1.1\r\nHost: x\r\n" + fields(100) + "\r\n", status: 431, conn: closes},
		// Methods.
		{name: "unknown method", req: "FOO /v1/embeddings HTTP/1.1\r\nHost: x\r\n\r\n", status: 501, conn: stays},
		{name: "lower-case method", req: "get /health HTTP/1.1\r\nHost: x\r\n\r\n", status: 501, conn: stays},
		{name: "TRACE on a passthrough path", req: "TRACE /v1/embeddings HTTP/1.1\r\nHost: x\r\n\r\n", status: 405, conn: stays, allow: passAllow},
		{name: "CONNECT on a passthrough path", req: "CONNECT /v1/embeddings HTTP/1.1\r\nHost: x\r\n\r\n", status: 405, conn: stays, allow: passAllow},
		{name: "CONNECT authority-form", req: "CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n", status: 405, conn: stays, allow: passAllow},
		{name: "TRACE on a routed path", req: "TRACE /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", status: 405, conn: stays, allow: "POST"},
		{name: "GET on chat", req: "GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", status: 405, conn: stays, allow: "POST"},
		{name: "PUT on completions", req: "PUT /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", status: 405, conn: stays, allow: "POST"},
		{name: "DELETE on responses", req: "DELETE /v1/responses HTTP/1.1\r\nHost: x\r\n\r\n", status: 405, conn: stays, allow: "POST"},
		{name: "HEAD on chat", req: "HEAD /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", status: 405, conn: stays, allow: "POST", head: true},
		{name: "POST on models", req: "POST /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", status: 405, conn: stays, allow: "GET, HEAD"},
		{name: "DELETE on a model", req: "DELETE /v1/models/m HTTP/1.1\r\nHost: x\r\n\r\n", status: 405, conn: stays, allow: "GET, HEAD"},
		{name: "POST on health", req: "POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", status: 405, conn: stays, allow: "GET, HEAD"},
		{name: "PUT on ready", req: "PUT /ready HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", status: 405, conn: stays, allow: "GET, HEAD"},
		// Expectations.
		{name: "Expect 200-ok", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}", status: 417, conn: closes},
		{name: "Expect list", req: "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nExpect: 100-continue, x\r\nContent-Length: 2\r\n\r\n{}", status: 417, conn: closes},
		// kvca's own answers that are not refusals.
		{name: "unknown path", req: "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", status: 404, conn: stays},
		{name: "HEAD on an unknown path", req: "HEAD /nope HTTP/1.1\r\nHost: x\r\n\r\n", status: 404, conn: stays, head: true},
		{name: "OPTIONS asterisk", req: "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", status: 200, conn: stays, allow: passAllow},
		{name: "HEAD on health", req: "HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n", status: 200, conn: stays, head: true},
	}
}

// TestAcceptancePolicy sends each probe on a connection of its own, plain
// and over TLS: the exact status, Allow where it applies, the connection
// closed (with Connection: close) or still serving, nothing forwarded, and
// nothing after the answer of a HEAD.
func TestAcceptancePolicy(t *testing.T) {
	t.Parallel()
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := newRawBackend(t, nil)
			_, d := startRawProxy(t, m, nil, func(c *Config) { c.Backends = []string{b.url("")} })
			for _, p := range acceptanceProbes() {
				t.Run(p.name, func(t *testing.T) {
					c := d.dial(t)
					c.send(p.req)
					r := c.read(p.head)
					if r.status != p.status {
						t.Fatalf("status %d, want %d: %q", r.status, p.status, r.head)
					}
					if got := r.field("Allow"); got != p.allow {
						t.Fatalf("Allow %q, want %q", got, p.allow)
					}
					if p.status >= 400 && !p.head && !strings.Contains(string(r.body), `"error":{"message":`) {
						t.Fatalf("not an error body: %q", r.body)
					}
					if p.head && r.field("Content-Length") == "" {
						t.Fatalf("HEAD answer without its Content-Length: %q", r.head)
					}
					switch p.conn {
					case closes:
						if r.field("Connection") != "close" {
							t.Fatalf("no Connection: close: %q", r.head)
						}
						c.closed()
					case stays:
						if r.field("Connection") != "" {
							t.Fatalf("Connection %q on an answer that keeps the connection", r.field("Connection"))
						}
						c.open() // also proves a HEAD answer had no body
					}
				})
			}
			b.none(t)
		})
	}
}

// TestAcceptedForms: what the policy accepts reaches the backend with the
// target kvca chose (origin-form, no authority of the client's) and the
// fields as sent.
func TestAcceptedForms(t *testing.T) {
	t.Parallel()
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := newRawBackend(t, nil)
			fields := ""
			for i := 0; i < 99; i++ {
				fields += fmt.Sprintf("X-F%d: v\r\n", i)
			}
			nearly := strings.Repeat("a", 16<<10-200)
			for _, tc := range []struct {
				name, req, line string
				preserve        bool
				host            string // "": the backend's authority
				check           func(rawReq) bool
				closes          bool
			}{
				{name: "absolute form", req: "POST http://evil.example:81/v1/embeddings?q=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
					line: "POST /v1/embeddings?q=1 HTTP/1.1", check: func(r rawReq) bool { return string(r.body) == "{}" }},
				{name: "absolute form, upper-case https", req: "GET HTTPS://EVIL.example/v1/files HTTP/1.1\r\nHost: x\r\n\r\n",
					line: "GET /v1/files HTTP/1.1"},
				{name: "absolute form with preserved Host", preserve: true, host: "x",
					req: "GET http://evil.example/v1/files HTTP/1.1\r\nHost: x\r\n\r\n", line: "GET /v1/files HTTP/1.1"},
				{name: "HTTP/1.0 without Host", req: "GET /v1/files HTTP/1.0\r\n\r\n", line: "GET /v1/files HTTP/1.1", closes: true},
				{name: "HTTP/1.0 keep-alive", req: "GET /v1/files HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", line: "GET /v1/files HTTP/1.1"},
				{name: "leading blank line", req: "\r\nGET /v1/files HTTP/1.1\r\nHost: x\r\n\r\n", line: "GET /v1/files HTTP/1.1"},
				{name: "obs-text and tab in values", req: "GET /v1/files HTTP/1.1\r\nHost: x\r\nX-Name: caf\xc3\xa9\r\nX-Tab: a\tb\r\n\r\n",
					line: "GET /v1/files HTTP/1.1", check: func(r rawReq) bool {
						return strings.Contains(r.head, "\r\nX-Name: caf\xc3\xa9\r\n") && strings.Contains(r.head, "\r\nX-Tab: a\tb\r\n")
					}},
				{name: "percent-encoded target", req: "GET /v1/files/a%20b?c=%2F&d HTTP/1.1\r\nHost: x\r\n\r\n", line: "GET /v1/files/a%20b?c=%2F&d HTTP/1.1"},
				{name: "100 fields", req: "GET /v1/files HTTP/1.1\r\nHost: x\r\n" + fields + "\r\n", line: "GET /v1/files HTTP/1.1",
					check: func(r rawReq) bool { return len(r.fields("X-F98")) == 1 }},
				{name: "head just under 16 KB", req: "GET /v1/files HTTP/1.1\r\nHost: x\r\nX-Long: " + nearly + "\r\n\r\n", line: "GET /v1/files HTTP/1.1",
					check: func(r rawReq) bool { return len(r.fields("X-Long")) == 1 && r.fields("X-Long")[0] == nearly }},
				{name: "HTTP/1.0 Expect ignored", req: "POST /v1/embeddings HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
					line: "POST /v1/embeddings HTTP/1.1", closes: true, check: func(r rawReq) bool { return r.fields("Expect") == nil && string(r.body) == "{}" }},
			} {
				t.Run(tc.name, func(t *testing.T) {
					_, d := startRawProxy(t, m, nil, func(c *Config) { c.Backends = []string{b.url("")}; c.PreserveHost = tc.preserve })
					c := d.dial(t)
					c.send(tc.req)
					got := b.next(t)
					r := c.read(false)
					if r.status != 200 {
						t.Fatalf("status %d: %q", r.status, r.head)
					}
					if got.line() != tc.line {
						t.Fatalf("backend got %q, want %q", got.line(), tc.line)
					}
					host := tc.host
					if host == "" {
						host = b.authority()
					}
					if h := got.fields("Host"); len(h) != 1 || h[0] != host {
						t.Fatalf("backend got Host %q, want %q", h, host)
					}
					if strings.Contains(strings.ToLower(got.head), "evil.example") {
						t.Fatalf("the absolute-form authority reached the backend: %q", got.head)
					}
					if tc.check != nil && !tc.check(got) {
						t.Fatalf("backend got %q %q", got.head, got.body)
					}
					if tc.closes {
						c.closed()
					} else {
						c.open()
					}
					b.none(t)
				})
			}
		})
	}
}

// idCase is a request and the id its answer must carry.
type idCase struct {
	name, req string
	status    int
	id        string // the client's id, echoed; "": a generated one
	closes    bool
}

// TestRequestIDOnEveryAnswer: every answer kvca writes, its own errors
// included, carries the request's id (the client's when valid and the
// head was accepted, else a generated one), and the access log line of
// that request names the same id and status.
func TestRequestIDOnEveryAnswer(t *testing.T) {
	t.Parallel()
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			t.Cleanup(func() { close(release) })
			b := newRawBackend(t, func(r rawReq) rawAnswer {
				switch strings.Fields(r.line())[1] {
				case "/v1/bad-answer":
					return rawAnswer{resp: "NOT HTTP AT ALL\r\n\r\n", close: true}
				case "/v1/slow":
					return rawAnswer{resp: okJSON, hold: release}
				}
				return rawAnswer{resp: okJSON}
			})
			logs := &testkit.LogBuffer{}
			_, d := startRawProxy(t, m, logs, func(c *Config) {
				c.Backends = []string{b.url("")}
				c.MaxBodyBytes = 1000
				c.UpstreamHeaderTimeout = 300 * time.Millisecond
			})
			// A backend that is down: no healthy backend, 503.
			dead := newRawBackend(t, nil)
			dead.healthStatus.Store(500)
			deadLogs := &testkit.LogBuffer{}
			ds, dd := startRawProxy(t, m, deadLogs, func(c *Config) {
				c.Backends = []string{dead.url("")}
				c.HealthInterval = 20 * time.Millisecond
			})
			testkit.WaitUntil(t, "the backend ejected", func() bool { return !ds.fleet().sched.Backends[0].Healthy() })

			body := conversation(1, 0, false)
			for _, tc := range []idCase{
				{"200 relayed", "GET /v1/files HTTP/1.1\r\nHost: x\r\nX-Request-Id: id-200\r\n\r\n", 200, "id-200", false},
				{"200 own", "GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: id-200-own\r\n\r\n", 200, "id-200-own", false},
				{"400 head refused", "GET /health HTTP/1.1\r\nX-Request-Id: id-400-head\r\n\r\n", 400, "", true},
				{"400 body refused", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: id-400\r\nContent-Length: 9\r\n\r\n{\"model\":", 400, "id-400", false},
				{"404", "GET /nope HTTP/1.1\r\nHost: x\r\nX-Request-Id: id-404\r\n\r\n", 404, "id-404", false},
				{"405", "GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: id-405\r\n\r\n", 405, "id-405", false},
				{"413", "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nX-Request-Id: id-413\r\nContent-Length: 1001\r\n\r\n", 413, "id-413", true},
				{"413 chunked", "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nX-Request-Id: id-413c\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n" + strings.Repeat("a", 1001) + "\r\n0\r\n\r\n", 413, "id-413c", true},
				{"417", "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nExpect: nothing\r\nContent-Length: 2\r\n\r\n{}", 417, "", true},
				{"431", "GET /health HTTP/1.1\r\nHost: x\r\nX-Long: " + strings.Repeat("a", 17<<10) + "\r\n\r\n", 431, "", true},
				{"501 method", "FOO /v1/files HTTP/1.1\r\nHost: x\r\nX-Request-Id: id-501\r\n\r\n", 501, "id-501", false},
				{"501 coding", "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, "", true},
				{"502", "GET /v1/bad-answer HTTP/1.1\r\nHost: x\r\nX-Request-Id: id-502\r\n\r\n", 502, "id-502", false},
				{"504", "POST /v1/slow HTTP/1.1\r\nHost: x\r\nX-Request-Id: id-504\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body, 504, "id-504", false},
				{"505", "GET /health HTTP/1.2\r\nHost: x\r\n\r\n", 505, "", true},
			} {
				t.Run(tc.name, func(t *testing.T) { checkID(t, d, logs, tc) })
			}
			t.Run("503", func(t *testing.T) {
				checkID(t, dd, deadLogs, idCase{"503", "GET /v1/files HTTP/1.1\r\nHost: x\r\nX-Request-Id: id-503\r\n\r\n", 503, "id-503", false})
			})
			dead.none(t)
		})
	}
}

func checkID(t *testing.T, d dialer, logs *testkit.LogBuffer, tc idCase) {
	t.Helper()
	c := d.dial(t)
	c.send(tc.req)
	r := c.read(false)
	if r.status != tc.status {
		t.Fatalf("status %d, want %d: %q", r.status, tc.status, r.head)
	}
	ids := r.fields("X-Request-Id")
	if len(ids) != 1 {
		t.Fatalf("X-Request-Id %q in %q", ids, r.head)
	}
	id := ids[0]
	if tc.id != "" && id != tc.id {
		t.Fatalf("X-Request-Id %q, want the client's %q", id, tc.id)
	}
	if tc.id == "" && !isGenerated(id) {
		t.Fatalf("X-Request-Id %q is not a generated id", id)
	}
	if l := logged(t, logs, id); l.Status != tc.status {
		t.Fatalf("access log says status %d for %s, the answer %d", l.Status, id, tc.status)
	}
	if tc.closes {
		c.closed()
	} else {
		c.open()
	}
}

// TestRequestIDRule: a client's X-Request-Id is kept only when it is 1 to
// 128 visible ASCII characters (and the only one); the id the client gets
// back, the backend gets and the access log names are one and the same.
func TestRequestIDRule(t *testing.T) {
	t.Parallel()
	visible := ""
	for c := byte('!'); c <= '~'; c++ {
		visible += string(c)
	}
	max := (visible + visible)[:128]
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := newRawBackend(t, nil)
			logs := &testkit.LogBuffer{}
			_, d := startRawProxy(t, m, logs, func(c *Config) { c.Backends = []string{b.url("")} })
			for _, tc := range []struct {
				name, fields string
				keep         string // the id kept; "": replaced
			}{
				{"one character", "X-Request-Id: a\r\n", "a"},
				{"128 visible characters", "X-Request-Id: " + max + "\r\n", max},
				{"blanks around it", "X-Request-Id: \t abc \t\r\n", "abc"},
				{"empty", "X-Request-Id:\r\n", ""},
				{"129 characters", "X-Request-Id: " + max + "x\r\n", ""},
				{"inner space", "X-Request-Id: a b\r\n", ""},
				{"inner tab", "X-Request-Id: a\tb\r\n", ""},
				{"non-ASCII", "X-Request-Id: caf\xc3\xa9\r\n", ""},
				{"two ids", "X-Request-Id: a\r\nX-Request-Id: b\r\n", ""},
			} {
				t.Run(tc.name, func(t *testing.T) {
					c := d.dial(t)
					c.send("GET /v1/files HTTP/1.1\r\nHost: x\r\n" + tc.fields + "\r\n")
					up := b.next(t)
					r := c.read(false)
					if r.status != 200 {
						t.Fatalf("status %d", r.status)
					}
					ids, upIDs := r.fields("X-Request-Id"), up.fields("X-Request-Id")
					if len(ids) != 1 || len(upIDs) != 1 || ids[0] != upIDs[0] {
						t.Fatalf("client got %q, backend %q", ids, upIDs)
					}
					if tc.keep != "" && ids[0] != tc.keep {
						t.Fatalf("id %q, want %q kept", ids[0], tc.keep)
					}
					if tc.keep == "" && !isGenerated(ids[0]) {
						t.Fatalf("id %q not replaced", ids[0])
					}
					if l := logged(t, logs, ids[0]); l.Status != 200 {
						t.Fatalf("logged status %d", l.Status)
					}
				})
			}
		})
	}
}

// TestRequestIDNotInjected: a client X-Request-Id holding a bare CR is
// refused and never echoed: the answer's head has one X-Request-Id (a
// generated one, checked below) and nothing else the client
// wrote.
func TestRequestIDNotInjected(t *testing.T) {
	t.Parallel()
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := newRawBackend(t, nil)
			logs := &testkit.LogBuffer{}
			_, d := startRawProxy(t, m, logs, func(c *Config) { c.Backends = []string{b.url("")} })
			// The client's id is not hex: a generated one never contains it.
			for _, req := range []string{
				"GET /v1/files HTTP/1.1\r\nHost: x\r\nX-Request-Id: xyz\rSet-Cookie: x=1\r\n\r\n",
				"GET /v1/files HTTP/1.1\r\nHost: x\r\nX-Request-Id: xyz\rSet-Cookie: x=1",
				"GET /v1/files HTTP/1.1\r\nHost: x\r\nX-Request-Id: xyz\x00Set-Cookie: x=1\r\n\r\n",
				"GET /v1/files HTTP/1.1\r\nHost: x\r\nX-Request-Id: xyz\nSet-Cookie: x=1\r\n\r\n",
			} {
				c := d.dial(t)
				c.send(req)
				r := c.read(false)
				if r.status != 400 {
					t.Fatalf("%q: status %d", req, r.status)
				}
				if strings.Contains(r.head, "Set-Cookie") || strings.Contains(r.head, "xyz") || strings.Count(r.head, "\r") != strings.Count(r.head, "\r\n") {
					t.Fatalf("%q: the client's bytes reached the answer's head: %q", req, r.head)
				}
				ids := r.fields("X-Request-Id")
				if len(ids) != 1 || !isGenerated(ids[0]) {
					t.Fatalf("%q: ids %q", req, ids)
				}
				logged(t, logs, ids[0])
				c.closed()
			}
			b.none(t)
		})
	}
}

// TestRequestIDsOnOneConnection: requests pipelined on one connection each
// get their own id in the answer and the access log, kvca's own answers
// and refusals included (never the previous request's).
func TestRequestIDsOnOneConnection(t *testing.T) {
	t.Parallel()
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := newRawBackend(t, nil)
			logs := &testkit.LogBuffer{}
			_, d := startRawProxy(t, m, logs, func(c *Config) { c.Backends = []string{b.url("")} })
			c := d.dial(t)
			c.send("GET /v1/files HTTP/1.1\r\nHost: x\r\nX-Request-Id: first\r\n\r\n" +
				"GET /nope HTTP/1.1\r\nHost: x\r\nX-Request-Id: second\r\n\r\n" +
				"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n" +
				"GET /health HTTP/1.1\r\nX-Request-Id: fourth\r\n\r\n")
			want := []int{200, 404, 405, 400}
			var ids []string
			for i, st := range want {
				r := c.read(false)
				if r.status != st {
					t.Fatalf("answer %d: status %d, want %d", i, r.status, st)
				}
				ids = append(ids, r.field("X-Request-Id"))
			}
			c.closed()
			if ids[0] != "first" || ids[1] != "second" || !isGenerated(ids[2]) || !isGenerated(ids[3]) || ids[2] == ids[3] {
				t.Fatalf("ids %q", ids)
			}
			for i, id := range ids {
				if l := logged(t, logs, id); l.Status != want[i] {
					t.Fatalf("id %s logged with status %d, want %d", id, l.Status, want[i])
				}
			}
			if n := len(accessLines(t, logs)); n != 4 {
				t.Fatalf("%d access log lines, want 4", n)
			}
		})
	}
}
