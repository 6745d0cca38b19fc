package testkit

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// IOTimeout bounds each raw read and write, so a peer that never answers
// fails the test instead of hanging it.
const IOTimeout = 10 * time.Second

// Conn is one raw TCP connection under test: bytes go out exactly as
// written and come back unparsed unless asked. Its methods fail the test
// on error; on a Conn from Dial they must run on the test goroutine, on
// one handed to a Backend handler they may run on the handler's goroutine.
type Conn struct {
	net.Conn
	R *bufio.Reader
	// N is a Backend connection's place in accept order, from 0.
	N    int
	t    testing.TB
	fail func(format string, args ...any)
	// cut: the Backend's CloseConns closed it, so what fails on it next
	// is the test's doing.
	cut atomic.Bool
}

// Dial connects to addr and closes the connection when the test ends.
func Dial(t testing.TB, addr string) *Conn {
	t.Helper()
	return DialTLS(t, addr, nil)
}

// DialTLS is Dial over TLS with cfg (nil: plain TCP); the handshake is
// done before it returns.
func DialTLS(t testing.TB, addr string, cfg *tls.Config) *Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, IOTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	if cfg != nil {
		if cfg.ServerName == "" {
			// As tls.Dial does: the certificate must name the host dialled.
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(nc, cfg)
		_ = tc.SetDeadline(time.Now().Add(IOTimeout))
		if err := tc.Handshake(); err != nil {
			t.Fatalf("TLS handshake with %s: %v", addr, err)
		}
		_ = tc.SetDeadline(time.Time{})
		nc = tc
	}
	return Wrap(t, nc)
}

// Wrap is a Conn over nc, a connection the test made otherwise (one whose
// dial may fail as part of what is tested). It does not close nc.
func Wrap(t testing.TB, nc net.Conn) *Conn {
	return &Conn{Conn: nc, R: bufio.NewReader(nc), t: t, fail: t.Fatalf}
}

// Send writes raw exactly as given.
func (c *Conn) Send(raw string) {
	c.t.Helper()
	if err := c.SetWriteDeadline(time.Now().Add(IOTimeout)); err != nil {
		c.fail("set write deadline: %v", err)
	}
	if _, err := io.WriteString(c.Conn, raw); err != nil {
		c.fail("write %.60q: %v", raw, err)
	}
}

// Head is a message head as it was on the wire.
type Head struct {
	// Raw is every byte of the head, the blank line included.
	Raw string
	// First is the start line without its CRLF, e.g. "HTTP/1.1 200 OK".
	First string
	// Status is the status code of a response head (0 for a request).
	Status int
	// Header holds the fields, canonicalised as net/http does; Raw keeps
	// their order and spelling.
	Header http.Header
}

// ReadHead reads one message head, through the blank line that ends it,
// and leaves the body in c.R.
func (c *Conn) ReadHead() *Head {
	c.t.Helper()
	h, err := c.readHead()
	if err != nil {
		c.fail("read head: %v", err)
	}
	return h
}

// NextHead is ReadHead for a server reading a connection's next request:
// it waits with no deadline, since a kept-alive connection may idle for
// as long as the test runs, and returns nil when the peer closes (or
// resets) the connection before a next message begins.
func (c *Conn) NextHead() *Head {
	c.t.Helper()
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		c.fail("clear read deadline: %v", err)
	}
	if _, err := c.R.Peek(1); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
			return nil
		}
		c.fail("waiting for a next message: %v", err)
	}
	return c.ReadHead()
}

func (c *Conn) readHead() (*Head, error) {
	if err := c.SetReadDeadline(time.Now().Add(IOTimeout)); err != nil {
		return nil, err
	}
	// Line by line from c.R: a textproto.Reader of its own would buffer
	// past the head into the body.
	var raw bytes.Buffer
	first, err := c.line(&raw)
	if err != nil {
		return nil, err
	}
	h := &Head{First: first, Header: http.Header{}}
	if strings.HasPrefix(first, "HTTP/") {
		_, code, _ := strings.Cut(first, " ")
		code, _, _ = strings.Cut(code, " ")
		if h.Status, err = strconv.Atoi(code); err != nil {
			return nil, fmt.Errorf("status line %q: %v", first, err)
		}
	}
	for {
		l, err := c.line(&raw)
		if err != nil {
			return nil, fmt.Errorf("after %q: %w", raw.String(), err)
		}
		if l == "" {
			break
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			return nil, fmt.Errorf("header line %q has no colon", l)
		}
		h.Header.Add(textproto.TrimString(k), textproto.TrimString(v))
	}
	h.Raw = raw.String()
	return h, nil
}

// line reads one CRLF-terminated line from c.R, appending it to raw.
func (c *Conn) line(raw *bytes.Buffer) (string, error) {
	l, err := c.R.ReadString('\n')
	raw.WriteString(l)
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(l, "\r\n") {
		return "", fmt.Errorf("line %q does not end in CRLF", l)
	}
	return l[:len(l)-2], nil
}

// ReadN reads exactly n bytes (of a body whose length is known).
func (c *Conn) ReadN(n int) []byte {
	c.t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(IOTimeout)); err != nil {
		c.fail("set read deadline: %v", err)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.R, b); err != nil {
		c.fail("read %d bytes: %v", n, err)
	}
	return b
}

// Response is one answer as it came: its head, its body as the client
// sees it (de-chunked) and as it was framed on the wire.
type Response struct {
	*Head
	Body []byte
	Wire []byte
}

// ReadResponse reads one answer, framed by its Content-Length, its chunked
// coding (trailers read and dropped) or the close of the connection; head:
// it answers a HEAD request, so no body follows.
func (c *Conn) ReadResponse(head bool) *Response {
	c.t.Helper()
	r := &Response{Head: c.ReadHead()}
	if head || r.Status < 200 || r.Status == 204 || r.Status == 304 {
		return r
	}
	if cl := r.Header.Values("Content-Length"); len(cl) > 0 {
		n, err := strconv.Atoi(cl[0])
		if err != nil {
			c.fail("Content-Length %q: %v", cl[0], err)
		}
		r.Body = c.ReadN(n)
		r.Wire = r.Body
		return r
	}
	if len(r.Header.Values("Transfer-Encoding")) > 0 {
		var wire bytes.Buffer
		for {
			l, err := c.line(&wire)
			if err != nil {
				c.fail("chunk size line: %v (after %q)", err, wire.String())
			}
			size, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(l, ";", 2)[0]), 16, 64)
			if err != nil {
				c.fail("chunk size %q", l)
			}
			if size == 0 {
				break
			}
			chunk := c.ReadN(int(size) + 2)
			wire.Write(chunk)
			if string(chunk[size:]) != "\r\n" {
				c.fail("chunk of %d bytes not followed by CRLF: %q", size, chunk)
			}
			r.Body = append(r.Body, chunk[:size]...)
		}
		for {
			l, err := c.line(&wire)
			if err != nil {
				c.fail("trailer line: %v (after %q)", err, wire.String())
			}
			if l == "" {
				break
			}
		}
		r.Wire = wire.Bytes()
		return r
	}
	r.Body = c.ReadToClose()
	r.Wire = r.Body
	return r
}

// ReadToClose reads until the peer closes the connection and returns
// what came; a reset counts as a close.
func (c *Conn) ReadToClose() []byte {
	c.t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(IOTimeout)); err != nil {
		c.fail("set read deadline: %v", err)
	}
	b, err := io.ReadAll(c.R)
	if err != nil && !isReset(err) {
		c.fail("read to close: %v (after %q)", err, b)
	}
	return b
}

// ExpectClosed fails unless the peer closes the connection without
// sending anything more.
func (c *Conn) ExpectClosed() {
	c.t.Helper()
	if b := c.ReadToClose(); len(b) > 0 {
		c.fail("want the connection closed, got %q", b)
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && strings.Contains(op.Err.Error(), "reset")
}

// Backend is a scripted raw-socket server on 127.0.0.1: each accepted
// connection runs handle on its own goroutine, where the Conn's methods
// fail the test with t.Errorf and end only that goroutine. The listener
// closes, and open connections with it, when the test ends, which then
// waits for every handler to return.
type Backend struct {
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]*Conn
	wg    sync.WaitGroup
	// accepted counts connections accepted so far.
	accepted int
	// stopping: the test has ended and closed the connections under the
	// handlers, whose errors are then not the peer's doing.
	stopping atomic.Bool
}

// StartBackend starts a scripted backend; see Backend.
func StartBackend(t testing.TB, handle func(c *Conn)) *Backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen 127.0.0.1:0: %v", err)
	}
	b := &Backend{ln: ln, conns: map[net.Conn]*Conn{}}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			c := &Conn{Conn: nc, R: bufio.NewReader(nc), N: b.accepted, t: t}
			b.conns[nc] = c
			b.accepted++
			b.mu.Unlock()
			c.fail = func(format string, args ...any) {
				if b.stopping.Load() || c.cut.Load() {
					runtime.Goexit()
				}
				t.Errorf("backend %s: "+format, append([]any{ln.Addr()}, args...)...)
				runtime.Goexit()
			}
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				defer func() {
					b.mu.Lock()
					delete(b.conns, nc)
					b.mu.Unlock()
					nc.Close()
				}()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() {
		b.stopping.Store(true)
		ln.Close()
		b.mu.Lock()
		for nc := range b.conns {
			nc.Close()
		}
		b.mu.Unlock()
		b.wg.Wait()
	})
	return b
}

// CloseConns closes every open connection, as a backend that drops idle
// kept-alive connections does; the listener stays open. A handler's Conn
// methods failing on a connection so closed end its goroutine quietly.
func (b *Backend) CloseConns() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for nc, c := range b.conns {
		c.cut.Store(true)
		nc.Close()
	}
}

// Addr is the backend's host:port.
func (b *Backend) Addr() string { return b.ln.Addr().String() }

// URL is "http://" + Addr().
func (b *Backend) URL() string { return "http://" + b.Addr() }

// Accepted is how many connections the backend has accepted.
func (b *Backend) Accepted() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.accepted
}
