//go:build linux

package edge

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
}

// rawBackend is a scripted backend on loopback: it records every request
// exactly as received and answers what answer returns. Health probes are
// answered 200 and not recorded.
type rawBackend struct {
	t      *testing.T
	ln     net.Listener
	answer func(r rawReq) rawAnswer
	reqs   chan rawReq
	done   chan struct{}
	health chan struct{} // one value per health probe answered (dropped when full)
	// healthStatus, when set, is the status health probes get.
	healthStatus atomic.Int32

	mu     sync.Mutex
	conns  map[int]net.Conn
	nconns int
	wg     sync.WaitGroup
}

const okJSON = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

func newRawBackend(t *testing.T, answer func(r rawReq) rawAnswer) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if answer == nil {
		answer = func(rawReq) rawAnswer { return rawAnswer{resp: okJSON} }
	}
	b := &rawBackend{t: t, ln: ln, answer: answer, reqs: make(chan rawReq, 256), done: make(chan struct{}),
		health: make(chan struct{}, 64), conns: map[int]net.Conn{}}
	b.wg.Add(1)
	go b.serve()
	t.Cleanup(b.stop)
	return b
}

// url is the backend's URL with path (e.g. "/engine1") and model m fixed,
// so that no model discovery request reaches it.
func (b *rawBackend) url(path string) string { return "http://" + b.ln.Addr().String() + path + "#m" }

func (b *rawBackend) authority() string { return b.ln.Addr().String() }

func (b *rawBackend) stop() {
	b.ln.Close()
	close(b.done)
	b.closeConns()
	b.wg.Wait()
}

// closeConns closes every open backend connection, as a backend that
// drops idle keep-alive connections does.
func (b *rawBackend) closeConns() {
	b.mu.Lock()
	for _, c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
}

func (b *rawBackend) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		id := b.nconns
		b.nconns++
		b.conns[id] = c
		b.mu.Unlock()
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer func() {
				b.mu.Lock()
				delete(b.conns, id)
				b.mu.Unlock()
				c.Close()
			}()
			b.conn(id, c)
		}()
	}
}

func (b *rawBackend) conn(id int, c net.Conn) {
	br := bufio.NewReader(c)
	for {
		var head strings.Builder
		for {
			l, err := br.ReadString('\n')
			head.WriteString(l)
			if err != nil {
				return
			}
			if l == "\r\n" {
				break
			}
		}
		r := rawReq{conn: id, head: head.String()}
		if cl := r.fields("content-length"); len(cl) == 1 {
			n, err := strconv.Atoi(cl[0])
			if err != nil {
				return
			}
			r.body = make([]byte, n)
			if _, err := io.ReadFull(br, r.body); err != nil {
				return
			}
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
		if _, err := io.WriteString(c, a.resp); err != nil || a.close {
			return
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
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

// dialer opens raw client connections to one proxy, plain or TLS.
type dialer struct {
	addr string
	tls  *tls.Config // nil: plain
}

func (d dialer) dial(t *testing.T) *rawConn {
	t.Helper()
	var c net.Conn
	var err error
	if d.tls != nil {
		c, err = tls.Dial("tcp", d.addr, d.tls)
	} else {
		c, err = net.Dial("tcp", d.addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (c *rawConn) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, s); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read reads one answer; head: the request was HEAD (no body follows).
func (c *rawConn) read(head bool) rawResp {
	c.t.Helper()
	r, err := readRawResp(c.br, head)
	if err != nil {
		c.t.Fatalf("reading the answer: %v (got %q)", err, r.head)
	}
	return r
}

func readRawResp(br *bufio.Reader, head bool) (rawResp, error) {
	var r rawResp
	var h strings.Builder
	for {
		l, err := br.ReadString('\n')
		h.WriteString(l)
		if err != nil {
			r.head = h.String()
			return r, err
		}
		if l == "\r\n" {
			break
		}
	}
	r.head = h.String()
	p := strings.SplitN(r.head, " ", 3)
	if len(p) < 3 || !strings.HasPrefix(p[0], "HTTP/1.") {
		return r, fmt.Errorf("bad status line")
	}
	r.status, _ = strconv.Atoi(p[1])
	if head || r.status < 200 || r.status == 204 || r.status == 304 {
		return r, nil
	}
	if cl := r.fields("content-length"); len(cl) > 0 {
		n, err := strconv.Atoi(cl[0])
		if err != nil {
			return r, err
		}
		r.body = make([]byte, n)
		_, err = io.ReadFull(br, r.body)
		r.raw = r.body
		return r, err
	}
	if te := r.fields("transfer-encoding"); len(te) > 0 {
		var raw bytes.Buffer
		for {
			l, err := br.ReadString('\n')
			raw.WriteString(l)
			if err != nil {
				return r, err
			}
			size, err := strconv.ParseInt(strings.TrimRight(strings.SplitN(l, ";", 2)[0], "\r\n"), 16, 64)
			if err != nil {
				return r, fmt.Errorf("chunk size %q", l)
			}
			if size == 0 {
				for {
					l, err := br.ReadString('\n')
					raw.WriteString(l)
					if err != nil {
						return r, err
					}
					if l == "\r\n" {
						r.raw = raw.Bytes()
						return r, nil
					}
				}
			}
			chunk := make([]byte, size+2)
			if _, err := io.ReadFull(br, chunk); err != nil {
				return r, err
			}
			raw.Write(chunk)
			r.body = append(r.body, chunk[:size]...)
		}
	}
	b, err := io.ReadAll(br) // delimited by the close
	r.body, r.raw = b, b
	return r, err
}

// closed checks that the proxy closed the connection: the next read ends
// (end of file or a reset) with no byte, before the deadline.
func (c *rawConn) closed() {
	c.t.Helper()
	var b [1]byte
	n, err := c.br.Read(b[:])
	var ne net.Error
	switch {
	case n > 0:
		c.t.Fatalf("connection still speaks: %q", b[:n])
	case err == nil:
		c.t.Fatal("connection not closed")
	case errors.As(err, &ne) && ne.Timeout():
		c.t.Fatal("connection left open")
	}
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
}

var edgeModes = []edgeMode{{"plain", false}, {"tls", true}}

// startRawProxy starts a proxy for the raw peers, plain or TLS, with
// timeouts long enough that any answer seen is not a timeout's; with
// logs, its access log goes to logs.
func startRawProxy(t *testing.T, m edgeMode, logs *lockedBuffer, mod func(*Config)) (*Server, dialer) {
	t.Helper()
	var tc *tls.Config
	s := startProxy(t, func(c *Config) {
		c.HeaderTimeout = time.Hour
		c.ClientReadTimeout = time.Hour
		c.HealthInterval = time.Hour
		c.Loops = 2
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
func accessLines(t *testing.T, logs *lockedBuffer) []accessLine {
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
func logged(t *testing.T, logs *lockedBuffer, id string) accessLine {
	t.Helper()
	var found []accessLine
	waitFor(t, "the access log line of "+id, func() bool {
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
	r, err := client.Get("http://" + s.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return metricIn(string(b), series)
}

// metricSum adds every series whose name and labels begin with prefix.
func metricSum(t *testing.T, s *Server, prefix string) float64 {
	t.Helper()
	r, err := client.Get("http://" + s.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, l := range strings.Split(string(b), "\n") {
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
