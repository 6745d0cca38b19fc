package testkit

import (
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestPollStopsWhenTrueAndGivesUpAtTheBound(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	if !poll(time.Hour, func() bool { return n.Add(1) == 3 }) {
		t.Fatal("poll gave up on a condition that became true")
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("cond ran %d times, want 3 (stop at the first true)", got)
	}
	n.Store(0)
	if poll(5*time.Millisecond, func() bool { n.Add(1); return false }) {
		t.Fatal("poll reported true for a condition that never held")
	}
	if n.Load() < 2 {
		t.Fatalf("cond ran %d times before giving up, want a retry at least", n.Load())
	}
}

// TestRawRoundTrip: bytes go out as written, the head comes back with its
// raw form, parsed fields and the body left unread.
func TestRawRoundTrip(t *testing.T) {
	t.Parallel()
	got := make(chan *Head, 1)
	done := make(chan struct{})
	b := StartBackend(t, func(c *Conn) {
		defer close(done)
		got <- c.ReadHead()
		c.Send("HTTP/1.1 201 Created\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 5\r\n\r\nhello")
		c.ExpectClosed()
	})
	c := Dial(t, b.Addr())
	req := "GET /p HTTP/1.1\r\nHost: h\r\nX-Odd:  spaced \r\n\r\n"
	c.Send(req)
	h := c.ReadHead()
	if h.Status != 201 || h.First != "HTTP/1.1 201 Created" {
		t.Fatalf("status %d, first line %q", h.Status, h.First)
	}
	if v := h.Header.Values("X-A"); strings.Join(v, ",") != "1,2" {
		t.Fatalf("X-A %q", v)
	}
	if want := "HTTP/1.1 201 Created\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 5\r\n\r\n"; h.Raw != want {
		t.Fatalf("raw head %q, want %q", h.Raw, want)
	}
	if body := string(c.ReadN(5)); body != "hello" {
		t.Fatalf("body %q", body)
	}
	rh := <-got
	if rh.Raw != req || rh.Status != 0 || rh.Header.Get("X-Odd") != "spaced" {
		t.Fatalf("backend read %+v", rh)
	}
	c.Close()
	<-done // the backend saw the close (ExpectClosed passed)
	if b.Accepted() != 1 {
		t.Fatalf("accepted %d connections, want 1", b.Accepted())
	}
}

// fakeListener records the address it was started on and whether it was
// closed.
type fakeListener struct {
	addr   string
	closed bool
}

func (f *fakeListener) Start(addr string) error { f.addr = addr; return nil }
func (f *fakeListener) Close() error            { f.closed = true; return nil }

func TestStartClosesAtCleanup(t *testing.T) {
	t.Parallel()
	f := &fakeListener{}
	t.Run("inner", func(t *testing.T) {
		if got := Start(t, f); got != f || f.addr != "127.0.0.1:0" || f.closed {
			t.Fatalf("started %+v", f)
		}
	})
	if !f.closed {
		t.Fatal("not closed when the test ended")
	}
}

// TestProxyCutAndResume: bytes pass through; a cut closes what is open and
// what arrives; after Resume new connections pass again.
func TestProxyCutAndResume(t *testing.T) {
	t.Parallel()
	echo := StartBackend(t, func(c *Conn) {
		for {
			l, err := c.R.ReadString('\n')
			if err != nil {
				return
			}
			c.Send(l)
		}
	})
	p := StartProxy(t, echo.Addr())
	roundTrip := func(c *Conn, s string) {
		t.Helper()
		c.Send(s + "\n")
		if got := string(c.ReadN(len(s) + 1)); got != s+"\n" {
			t.Fatalf("echo %q, want %q", got, s)
		}
	}
	c := Dial(t, p.Addr())
	roundTrip(c, "one")
	p.Cut()
	c.ExpectClosed()
	Dial(t, p.Addr()).ExpectClosed()
	p.Resume()
	roundTrip(Dial(t, p.Addr()), "two")
}

// TestResponsesAndKeepAlive: a scripted backend serves several requests on
// one connection (NextHead ends at the client's close), in the three
// framings ReadResponse knows, and numbers its connections; CloseConns
// closes the open ones under their handlers.
func TestResponsesAndKeepAlive(t *testing.T) {
	t.Parallel()
	answers := []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=y\r\nde\r\n1\r\nf\r\n0\r\nT: v\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\nuntil the close",
	}
	served := make(chan int, 8)
	b := StartBackend(t, func(c *Conn) {
		for i := 0; ; i++ {
			if c.NextHead() == nil {
				served <- i
				return
			}
			c.Send(answers[i])
			if i == len(answers)-1 {
				served <- i + 1
				return
			}
		}
	})
	c := Dial(t, b.Addr())
	want := []struct{ body, wire string }{
		{"abc", "abc"},
		{"def", "2;x=y\r\nde\r\n1\r\nf\r\n0\r\nT: v\r\n\r\n"},
		{"until the close", "until the close"},
	}
	for i, w := range want {
		c.Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
		r := c.ReadResponse(false)
		if r.Status != 200 || string(r.Body) != w.body || string(r.Wire) != w.wire {
			t.Fatalf("answer %d: status %d, body %q, wire %q", i, r.Status, r.Body, r.Wire)
		}
	}
	if n := <-served; n != 3 {
		t.Fatalf("first connection served %d requests, want 3", n)
	}
	// A second connection, closed by the client before any request.
	c2 := Dial(t, b.Addr())
	c2.Close()
	if n := <-served; n != 0 {
		t.Fatalf("second connection served %d requests, want 0", n)
	}
	// A third, closed by the backend.
	c3 := Dial(t, b.Addr())
	WaitUntil(t, "the third connection accepted", func() bool { return b.Accepted() == 3 })
	b.CloseConns()
	c3.ExpectClosed()
	// Its handler ends either way: at NextHead's nil, or, closed before
	// it began, quietly at its first call (a cut connection fails no test).
}

// TestIsolate: the test runs again in a child process, where IsChild
// holds and the parent's does not.
func TestIsolate(t *testing.T) {
	t.Parallel()
	if !Isolate(t) {
		if IsChild(t) {
			t.Fatal("the parent took itself for the child")
		}
		return
	}
	if os.Getenv(childEnv) != "TestIsolate" {
		t.Fatalf("%s=%q in the child", childEnv, os.Getenv(childEnv))
	}
}
