//go:build linux

package edge

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvca/kvca/internal/testkit"
)

// startLoopProxy is startProxy, checking the event loops run.
func startLoopProxy(t *testing.T, mod func(*Config), backends ...*testBackend) *Server {
	t.Helper()
	s := startProxy(t, mod, backends...)
	if s.evl == nil {
		t.Fatal("event loops not running")
	}
	return s
}

// Pipelined requests are answered in order on one connection, each routed
// and relayed by the loop.
func TestLoopPipelined(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	s := startLoopProxy(t, nil, b)
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var wire strings.Builder
	const n = 5
	for i := 0; i < n; i++ {
		body := conversation(i, 0, i%2 == 0)
		fmt.Fprintf(&wire, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: req-%d\r\nX-Forwarded-For: 10.0.0.%d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", i, i, len(body), body)
	}
	if _, err := io.WriteString(conn, wire.String()); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	for i := 0; i < n; i++ {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(body) == 0 {
			t.Fatalf("response %d: status %d, %d bytes, %v", i, resp.StatusCode, len(body), err)
		}
		if got := resp.Header.Get("X-Request-Id"); got != fmt.Sprintf("req-%d", i) {
			t.Fatalf("response %d answers request %q", i, got)
		}
	}
	b.mu.Lock()
	got := len(b.bodies)
	b.mu.Unlock()
	if got != n {
		t.Fatalf("backend saw %d requests, want %d", got, n)
	}
	// Earlier hops are extended, not replaced.
	b.mu.Lock()
	h := b.hdrs[0]
	b.mu.Unlock()
	if !strings.Contains(h, "X-Forwarded-For: 10.0.0.0, 127.0.0.1") {
		t.Fatalf("X-Forwarded-For not extended: %q", h)
	}
	waitIdle(t, s)
}

// Every shape of request is served by the loop: a chunked upload (sent
// byte by byte), Expect, HTTP/1.0, GETs, kvca's own answers, refusals.
func TestLoopServesEveryShape(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	s := startLoopProxy(t, nil, b)
	body := conversation(1, 0, false)
	for _, tc := range []struct {
		name, req string
		status    int
	}{
		{"chunked upload", fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body), 200},
		{"expect", fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n%s", len(body), body), 200},
		{"HTTP/1.0", fmt.Sprintf("POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body), 200},
		{"models", "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 200},
		{"health", "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 200},
		{"GET on a routed path", "GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", 405},
		{"garbage", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			// Byte by byte for one case: the loop must keep what it read.
			if tc.name == "chunked upload" {
				for i := 0; i < len(tc.req); i++ {
					if _, err := conn.Write([]byte{tc.req[i]}); err != nil {
						t.Fatal(err)
					}
				}
			} else if _, err := io.WriteString(conn, tc.req); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err == nil && resp.StatusCode == 100 {
				resp, err = http.ReadResponse(br, nil) // after 100 Continue
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			conn.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.status)
			}
		})
	}
	waitIdle(t, s)
}

// A client that sends its request and leaves before the answer releases
// the backend's load at once, and the backend connection is closed.
func TestLoopClientLeavesBeforeAnswer(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	b.hold = make(chan struct{}) // no answer before the client has gone
	t.Cleanup(func() { close(b.hold) })
	s := startLoopProxy(t, nil, b)
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	body := conversation(1, 0, true)
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	testkit.WaitUntil(t, "request at the backend", func() bool { return s.fleet().sched.Backends[0].Active() == 1 })
	conn.Close()
	testkit.WaitUntil(t, "load released", func() bool {
		return s.fleet().sched.Backends[0].Active() == 0 && s.fleet().sched.Backends[0].Prefill() == 0
	})
	if got := s.m.disconnects.Get(); got != 1 {
		t.Fatalf("disconnects %d, want 1", got)
	}
}

// A panic while serving one connection (a bug) is caught by its loop:
// that connection is closed without an answer, its load released once,
// the panic logged, and the loop goes on serving.
func TestLoopPanicGuard(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	logs := &testkit.LogBuffer{}
	s := startLoopProxy(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		c.testHook = func(at string, body []byte) {
			if bytes.Contains(body, []byte("boom-"+at)) {
				panic("test: boom at " + at)
			}
		}
	}, b)
	for i, at := range []string{"request", "answer"} {
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		body := strings.Replace(conversation(i, 0, false), "please", "please boom-"+at, 1)
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
			t.Fatalf("panic at %s: got an answer (%d), want the connection closed", at, resp.StatusCode)
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("panic at %s: connection left open", at)
		}
		conn.Close()
		testkit.WaitUntil(t, "load released", func() bool {
			return s.fleet().sched.Backends[0].Active() == 0 && s.fleet().sched.Backends[0].Prefill() == 0
		})
		c := testkit.Dial(t, s.Addr())
		body = conversation(i+10, 0, false)
		c.Send(fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
		if r := c.ReadResponse(false); r.Status != 200 {
			t.Fatalf("after the panic at %s: status %d, want 200", at, r.Status)
		}
		c.Close()
	}
	if hits := b.hits.Load(); hits != 3 {
		t.Fatalf("backend saw %d requests, want 3 (the panic at request never reaches it)", hits)
	}
	// Released once: a second release would leave the counts below zero.
	// Every client connection closed and forgotten by the loop, whatever
	// it releases on a connection's answer or end has been released.
	testkit.WaitUntil(t, "every client connection gone", func() bool { return metric(t, s, "kvca_client_connections") == 0 })
	if a, p := s.fleet().sched.Backends[0].Active(), s.fleet().sched.Backends[0].Prefill(); a != 0 || p != 0 {
		t.Fatalf("active %d prefill %d after every request ended, want 0 0", a, p)
	}
	if got := strings.Count(logs.String(), "panic serving a connection"); got != 2 {
		t.Fatalf("%d panics logged, want 2:\n%s", got, logs.String())
	}
}

// A large body is canonicalised off its loop: while one is being planned
// the loop serves its other connections, a client that leaves meanwhile
// is counted as gone, its request never reaching a backend, and a panic
// there closes only its connection. One that mostly resends a remembered
// body stays on the loop.
func TestLoopPlansLargeBodiesOffLoop(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	s := startLoopProxy(t, func(c *Config) {
		c.Loops = 1 // one loop: were it blocked, nothing would be served
		c.testHook = func(at string, body []byte) {
			if at != "plan" {
				return
			}
			if bytes.Contains(body, []byte("gamma ")) {
				panic("test: boom while planning")
			}
			entered <- struct{}{}
			<-release
		}
	}, b)
	l := s.evl.loops[0]
	big := func(word string) string {
		return `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat(word+" ", offloadBody/len(word)) + `"}]}`
	}
	send := func(body string) net.Conn {
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("a large body was not planned off the loop")
		}
		return conn
	}

	conn := send(big("alpha"))
	defer conn.Close()
	for i := 0; i < 3; i++ {
		if resp, out := post(t, s, "/v1/chat/completions", conversation(i, 0, false)); resp.StatusCode != 200 {
			t.Fatalf("request while a large body is planned: %d %s", resp.StatusCode, out)
		}
	}
	release <- struct{}{}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the large body's answer: %v %v", resp, err)
	}
	resp.Body.Close()
	waitIdle(t, s)

	hits, open := b.hits.Load(), l.open.Load()
	conn2 := send(big("beta"))
	conn2.Close()
	testkit.WaitUntil(t, "the loop to see the client leave", func() bool { return l.open.Load() == open })
	release <- struct{}{}
	testkit.WaitUntil(t, "the disconnect counted", func() bool { return s.m.disconnects.Get() == 1 })
	waitIdle(t, s)
	if got := b.hits.Load(); got != hits {
		t.Fatalf("the backend got %d requests after the client left, want none", got-hits)
	}

	// A panic while planning (a bug) closes that connection only.
	conn3, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn3.Close()
	body := big("gamma")
	fmt.Fprintf(conn3, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = conn3.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(conn3), nil); err == nil {
		t.Fatalf("panic while planning: got an answer (%d), want the connection closed", resp.StatusCode)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("panic while planning: connection left open")
	}
	if resp, out := post(t, s, "/v1/chat/completions", conversation(9, 0, false)); resp.StatusCode != 200 {
		t.Fatalf("after a panic while planning: %d %s", resp.StatusCode, out)
	}
	waitIdle(t, s)

	// A large body that mostly resends one the resumer remembers (the
	// first, answered) is planned on the loop: the goroutine's hook never
	// runs, and the answer comes.
	next := strings.TrimSuffix(big("alpha"), "]}") + `,{"role":"assistant","content":"ok"},{"role":"user","content":"and then?"}]}`
	if resp, out := post(t, s, "/v1/chat/completions", next); resp.StatusCode != 200 {
		t.Fatalf("a large follow-up: %d %s", resp.StatusCode, out)
	}
	select {
	case <-entered:
		t.Fatal("a large follow-up of a remembered body was planned off the loop")
	default:
	}
	if st := s.canon.ResumeStats(); st.Hits == 0 {
		t.Fatalf("the follow-up was not resumed: %+v", st)
	}
	waitIdle(t, s)
}
