//go:build linux

package edge

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvca/kvca/internal/testkit"
)

// Raw peers: a backend and a client that speak bytes, so that what a test
// checks is exactly what crossed the wire, with no HTTP library in
// between to normalise names, merge fields or re-frame bodies.

// rawReq is one request as a raw backend received it.
type rawReq struct {
	conn int    // the backend connection it came on, in accept order
	head string // request line and fields, final CRLF CRLF included
	body []byte
}

// line is the request line.
func (r rawReq) line() string { return r.head[:strings.Index(r.head, "\r\n")] }

// fields returns every value of name (any case), in order.
func (r rawReq) fields(name string) []string { return headFields(r.head, name) }

// names returns every field name as sent, in order.
func (r rawReq) names() []string { return headNames(r.head) }

func headFields(head, name string) []string {
	var vs []string
	for _, l := range strings.Split(head, "\r\n")[1:] {
		if n, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(n, name) {
			vs = append(vs, strings.Trim(v, " \t"))
		}
	}
	return vs
}

func headNames(head string) []string {
	var ns []string
	for _, l := range strings.Split(head, "\r\n")[1:] {
		if n, _, ok := strings.Cut(l, ":"); ok {
			ns = append(ns, n)
		}
	}
	return ns
}

// rawAnswer is what a raw backend sends for one request.
type rawAnswer struct {
	resp  string
	close bool // close the connection after resp
	// hold, when set, delays the answer until it is closed (or the
	// backend stops).
	hold <-chan struct{}
	// rest, when set, is written after resp once restHold is closed: an
	// answer that stops after its first bytes.
	rest     string
	restHold <-chan struct{}
}

// rawBackend is a scripted backend on loopback (a testkit.Backend): it
// records every request exactly as received and answers what answer
// returns. Health probes are answered 200 and not recorded.
type rawBackend struct {
	*testkit.Backend
	answer func(r rawReq) rawAnswer
	reqs   chan rawReq
	done   chan struct{}
	health chan struct{} // one value per health probe answered (dropped when full)
	// healthStatus, when set, is the status health probes get.
	healthStatus atomic.Int32
}

const okJSON = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

func newRawBackend(t *testing.T, answer func(r rawReq) rawAnswer) *rawBackend {
	t.Helper()
	if answer == nil {
		answer = func(rawReq) rawAnswer { return rawAnswer{resp: okJSON} }
	}
	b := &rawBackend{answer: answer, reqs: make(chan rawReq, 256), done: make(chan struct{}),
		health: make(chan struct{}, 64)}
	b.Backend = testkit.StartBackend(t, b.conn)
	// Registered after StartBackend's, so it runs first: held answers let
	// go before the backend waits for its handlers.
	t.Cleanup(func() { close(b.done) })
	return b
}

// url is the backend's URL with path (e.g. "/engine1") and model m fixed,
// so that no model discovery request reaches it.
func (b *rawBackend) url(path string) string { return b.URL() + path + "#m" }

func (b *rawBackend) authority() string { return b.Addr() }

func (b *rawBackend) conn(c *testkit.Conn) {
	for {
		h := c.NextHead()
		if h == nil {
			return
		}
		r := rawReq{conn: c.N, head: h.Raw}
		if cl := r.fields("content-length"); len(cl) == 1 {
			n, err := strconv.Atoi(cl[0])
			if err != nil {
				return
			}
			r.body = c.ReadN(n)
		}
		if p := strings.Fields(r.line()); len(p) == 3 && strings.HasSuffix(p[1], "/health") {
			status := b.healthStatus.Load()
			if status == 0 {
				status = 200
			}
			fmt.Fprintf(c, "HTTP/1.1 %d X\r\nContent-Length: 2\r\n\r\nok", status)
			select {
			case b.health <- struct{}{}:
			default:
			}
			if len(r.fields("connection")) > 0 {
				return // net/http's probes ask to close
			}
			continue
		}
		b.reqs <- r
		a := b.answer(r)
		if a.hold != nil {
			select {
			case <-a.hold:
			case <-b.done:
				return
			}
		}
		// Not c.Send: the proxy may have given up on the answer and
		// closed the connection, which is no failure of the test.
		if _, err := io.WriteString(c, a.resp); err != nil || a.close {
			return
		}
		if a.rest != "" {
			select {
			case <-a.restHold:
			case <-b.done:
				return
			}
			if _, err := io.WriteString(c, a.rest); err != nil {
				return
			}
		}
	}
}

// next returns the next request received.
func (b *rawBackend) next(t *testing.T) rawReq {
	t.Helper()
	select {
	case r := <-b.reqs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the backend")
		return rawReq{}
	}
}

// none checks that no request reached the backend.
func (b *rawBackend) none(t *testing.T) {
	t.Helper()
	select {
	case r := <-b.reqs:
		t.Fatalf("a request reached the backend: %q", r.head)
	default:
	}
}

// rawResp is one answer as a raw client received it.
type rawResp struct {
	status int
	head   string
	body   []byte // de-chunked for a chunked answer
	raw    []byte // the body as framed on the wire
}

func (r rawResp) fields(name string) []string { return headFields(r.head, name) }

func (r rawResp) field(name string) string {
	if vs := r.fields(name); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// rawConn is a client connection to a proxy.
type rawConn struct {
	*testkit.Conn
	t *testing.T
}

// dialer opens raw client connections to one proxy, plain or TLS.
type dialer struct {
	addr string
	tls  *tls.Config // nil: plain
}

func (d dialer) dial(t *testing.T) *rawConn {
	t.Helper()
	return &rawConn{testkit.DialTLS(t, d.addr, d.tls), t}
}

func (c *rawConn) send(s string) {
	c.t.Helper()
	c.Send(s)
}

// read reads one answer; head: the request was HEAD (no body follows).
func (c *rawConn) read(head bool) rawResp {
	c.t.Helper()
	r := c.ReadResponse(head)
	return rawResp{status: r.Status, head: r.Raw, body: r.Body, raw: r.Wire}
}

// closed checks that the proxy closed the connection: the next read ends
// (end of file or a reset) with no byte, before the deadline.
func (c *rawConn) closed() {
	c.t.Helper()
	c.ExpectClosed()
}

// open checks that the connection still serves: a second request on it
// is answered.
func (c *rawConn) open() {
	c.t.Helper()
	c.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := c.read(false); r.status != 200 || string(r.body) != "{\"status\":\"ok\"}\n" {
		c.t.Fatalf("the connection does not serve a next request: %d %q", r.status, r.body)
	}
}

// edgeMode is how clients reach the proxy in a test.
type edgeMode struct {
	name string
	tls  bool
	// noRing: the loops send each write with its own call, without
	// io_uring's write-behind (--io-uring=false, or a kernel that refuses
	// io_uring).
	noRing bool
}

var edgeModes = []edgeMode{{"plain", false, false}, {"tls", true, false}, {"plain-sendcalls", false, true}}

// startRawProxy starts a proxy for the raw peers, plain or TLS, with
// timeouts long enough that any answer seen is not a timeout's; with
// logs, its access log goes to logs.
func startRawProxy(t *testing.T, m edgeMode, logs *testkit.LogBuffer, mod func(*Config)) (*Server, dialer) {
	t.Helper()
	var tc *tls.Config
	s := startProxy(t, func(c *Config) {
		c.HeaderTimeout = time.Hour
		c.ClientReadTimeout = time.Hour
		c.HealthInterval = time.Hour
		c.Loops = 2
		c.NoIOUring = m.noRing
		if logs != nil {
			c.Logger = slog.New(slog.NewJSONHandler(logs, nil))
			c.AccessLog = true
		}
		if m.tls {
			ca := newTestCA(t)
			cp, kp := ca.issue(t, "edge")
			c.TLSCert, c.TLSKey = writePair(t, t.TempDir(), "edge", cp, kp)
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(ca.pem)
			tc = &tls.Config{RootCAs: pool}
		}
		if mod != nil {
			mod(c)
		}
	})
	return s, dialer{addr: s.Addr(), tls: tc}
}

// accessLine is one access log line.
type accessLine struct {
	Msg       string `json:"msg"`
	RequestID string `json:"request_id"`
	Status    int    `json:"status"`
	Route     string `json:"route"`
	Outcome   string `json:"outcome"`
}

// accessLines parses the access log lines written so far.
func accessLines(t *testing.T, logs *testkit.LogBuffer) []accessLine {
	t.Helper()
	var ls []accessLine
	for _, l := range strings.Split(logs.String(), "\n") {
		if l == "" {
			continue
		}
		var a accessLine
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if a.Msg == "request" {
			ls = append(ls, a)
		}
	}
	return ls
}

// logged waits for the access log line of the request with id and
// returns it; there must be exactly one.
func logged(t *testing.T, logs *testkit.LogBuffer, id string) accessLine {
	t.Helper()
	var found []accessLine
	testkit.WaitUntil(t, "the access log line of "+id, func() bool {
		found = found[:0]
		for _, a := range accessLines(t, logs) {
			if a.RequestID == id {
				found = append(found, a)
			}
		}
		return len(found) > 0
	})
	if len(found) != 1 {
		t.Fatalf("%d access log lines for %s: %+v", len(found), id, found)
	}
	return found[0]
}

// metric reads one series from the proxy's /metrics on its admin
// listener (0 when absent).
func metric(t *testing.T, s *Server, series string) float64 {
	t.Helper()
	return metricIn(scrape(t, s), series)
}

// metricSum adds every series whose name and labels begin with prefix.
func metricSum(t *testing.T, s *Server, prefix string) float64 {
	t.Helper()
	sum := 0.0
	for _, l := range strings.Split(scrape(t, s), "\n") {
		if strings.HasPrefix(l, prefix) {
			i := strings.LastIndexByte(l, ' ')
			v, err := strconv.ParseFloat(l[i+1:], 64)
			if err != nil {
				t.Fatalf("metric line %q", l)
			}
			sum += v
		}
	}
	return sum
}

func metricIn(text, series string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, series+" ") {
			v, _ := strconv.ParseFloat(strings.TrimPrefix(l, series+" "), 64)
			return v
		}
	}
	return 0
}

// isGenerated reports whether id has the shape of an id kvca generates.
func isGenerated(id string) bool {
	if len(id) != 16 {
		return false
	}
	for _, c := range id {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}
