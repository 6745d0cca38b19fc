package edge

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func TestParseRequestHead(t *testing.T) {
	const body = `{"model":"m"}`
	ok := "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 13\r\nX-Forwarded-For: 10.0.0.1\r\nX-Request-Id:  abc \r\nConnection: keep-alive, Close\r\n\r\n" + body
	var h reqHead
	if r := parseRequestHead([]byte(ok), &h); r != headOK {
		t.Fatalf("parse: %d", r)
	}
	b := []byte(ok)
	if string(h.method.of(b)) != "POST" || string(h.uri.of(b)) != "/v1/chat/completions?x=1" || string(h.path.of(b)) != "/v1/chat/completions" {
		t.Fatalf("request line: %q %q %q", h.method.of(b), h.uri.of(b), h.path.of(b))
	}
	if h.minor != 1 || !h.hasLen || h.contentLen != 13 || !h.close || h.hasTE || h.expect || h.upgrade {
		t.Fatalf("flags: %+v", h)
	}
	if string(h.rid.of(b)) != "abc" || h.xffN != 1 || h.nh != 5 {
		t.Fatalf("rid %q xff lines %d nh %d", h.rid.of(b), h.xffN, h.nh)
	}
	if string(b[h.size:]) != body {
		t.Fatalf("head size %d", h.size)
	}
	// Every prefix of a complete head asks for more.
	for i := 0; i < h.size; i++ {
		if r := parseRequestHead(b[:i], &h); r != headMore {
			t.Fatalf("prefix %d: %d", i, r)
		}
	}
	// What the loop must not serve itself goes to fasthttp.
	for _, tc := range []struct{ name, head string }{
		{"no request line spaces", "POST\r\n\r\n"},
		{"absolute form", "POST http://x/v1/chat/completions HTTP/1.1\r\nContent-Length: 0\r\n\r\n"},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\n"},
		{"obs-fold", "POST / HTTP/1.1\r\nA: b\r\n c\r\n\r\n"},
		{"header without colon", "POST / HTTP/1.1\r\nbroken\r\n\r\n"},
		{"bad header name", "POST / HTTP/1.1\r\nA b: c\r\n\r\n"},
		{"two lengths", "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n"},
		{"signed length", "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n"},
		{"bare LF", "POST / HTTP/1.1\nHost: a\n\n"},
	} {
		if r := parseRequestHead([]byte(tc.head), &h); r != headOther {
			t.Errorf("%s: %d, want headOther", tc.name, r)
		}
	}
	for _, tc := range []struct {
		head string
		flag func(*reqHead) bool
	}{
		{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", func(h *reqHead) bool { return h.hasTE }},
		{"POST / HTTP/1.1\r\nexpect: 100-continue\r\n\r\n", func(h *reqHead) bool { return h.expect }},
		{"POST / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n", func(h *reqHead) bool { return h.upgrade }},
		{"POST / HTTP/1.0\r\n\r\n", func(h *reqHead) bool { return h.minor == 0 }},
	} {
		if r := parseRequestHead([]byte(tc.head), &h); r != headOK || !tc.flag(&h) {
			t.Errorf("%q: %d %+v", tc.head, r, h)
		}
	}
	// More header lines than the fast path takes.
	many := "POST / HTTP/1.1\r\n" + strings.Repeat("A: b\r\n", maxHeaders+1) + "\r\n"
	if r := parseRequestHead([]byte(many), &h); r != headOther {
		t.Errorf("too many headers: %d", r)
	}
}

func TestParseResponseHead(t *testing.T) {
	var h respHead
	for _, tc := range []struct {
		head    string
		status  int
		framing int
		close   bool
		sse     bool
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", 200, bodyFixed, false, false},
		{"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n", 200, bodyChunked, false, true},
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 200, bodyChunked, false, false},
		{"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", 200, bodyUntilClose, true, false},
		{"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", 200, bodyNone, true, false},
		{"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n", 200, bodyFixed, false, false},
		{"HTTP/1.1 204 No Content\r\n\r\n", 204, bodyNone, false, false},
		{"HTTP/1.1 429\r\nContent-Length: 0\r\n\r\n", 429, bodyNone, false, false},
	} {
		if r := parseResponseHead([]byte(tc.head), &h); r != headOK {
			t.Fatalf("%q: %d", tc.head, r)
		}
		if h.status != tc.status || h.framing(false) != tc.framing || h.close != tc.close || h.sse != tc.sse || h.size != len(tc.head) {
			t.Errorf("%q: status %d framing %d close %v sse %v size %d", tc.head, h.status, h.framing(false), h.close, h.sse, h.size)
		}
	}
	for _, bad := range []string{
		"HTTP/2 200\r\n\r\n",
		"HTTP/1.1 2x0 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.1 200 OK\r\n folded\r\n\r\n",
	} {
		if r := parseResponseHead([]byte(bad), &h); r != headOther {
			t.Errorf("%q: %d, want headOther", bad, r)
		}
	}
	if r := parseResponseHead([]byte("HTTP/1.1 200 OK\r\nContent-Le"), &h); r != headMore {
		t.Errorf("partial: %d", r)
	}
}

// chunked encodes pieces as a chunked body with an extension and a
// trailer, the way a server may.
func chunked(pieces ...string) string {
	var b strings.Builder
	for i, p := range pieces {
		if i%2 == 1 {
			fmt.Fprintf(&b, "%X;ext=1\r\n%s\r\n", len(p), p)
		} else {
			fmt.Fprintf(&b, "%x\r\n%s\r\n", len(p), p)
		}
	}
	b.WriteString("0\r\nX-Trailer: t\r\n\r\n")
	return b.String()
}

// The scanner finds the end of a chunked body however its bytes are cut,
// counts none of what follows, and knows when it is between chunks.
func TestChunkScan(t *testing.T) {
	body := chunked("data: {\"a\":1}\n\n", strings.Repeat("x", 300), "data: [DONE]\n\n")
	wire := body + "HTTP/1.1 200 OK\r\n" // the next response on the connection
	for step := 1; step <= len(wire); step++ {
		var s chunkScan
		consumed := 0
		done := false
		for off := 0; off < len(wire) && !done; off += step {
			end := min(off+step, len(wire))
			n, d, err := s.scan([]byte(wire[off:end]))
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			consumed += n
			done = d
			if !d && n != end-off {
				t.Fatalf("step %d: consumed %d of %d before the end", step, n, end-off)
			}
		}
		if !done || consumed != len(body) {
			t.Fatalf("step %d: done %v after %d bytes, body is %d", step, done, consumed, len(body))
		}
	}
	var s chunkScan
	if !s.between() {
		t.Fatal("not between chunks at the start")
	}
	first := chunked("data: {\"a\":1}\n\n")
	first = first[:len(first)-len("0\r\nX-Trailer: t\r\n\r\n")]
	if _, _, err := s.scan([]byte(first[:5])); err != nil || s.between() {
		t.Fatal("between chunks inside one")
	}
	if _, _, err := s.scan([]byte(first[5:])); err != nil || !s.between() {
		t.Fatalf("not between chunks after one: %v", err)
	}
	for _, bad := range []string{"\r\n", "g\r\n", "5\r\nabcdeXY", "1\r\na\r\r", "1234567890abcdef0\r\n", "5\n"} {
		var s chunkScan
		if _, _, err := s.scan([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func FuzzChunkScan(f *testing.F) {
	f.Add([]byte(chunked("a", "bc")), 3)
	f.Add([]byte("5;x\r\nhello\r\n0\r\n\r\n"), 1)
	f.Fuzz(func(t *testing.T, wire []byte, step int) {
		if step <= 0 || step > len(wire)+1 {
			step = 1
		}
		var whole chunkScan
		wn, wdone, werr := whole.scan(wire)
		var s chunkScan
		n := 0
		var err error
		done := false
		for off := 0; off < len(wire) && !done && err == nil; off += step {
			var k int
			k, done, err = s.scan(wire[off:min(off+step, len(wire))])
			n += k
		}
		if (err == nil) != (werr == nil) || done != wdone || (err == nil && n != wn) {
			t.Fatalf("split scan %d %v %v, whole %d %v %v", n, done, err, wn, wdone, werr)
		}
		if wdone && !bytes.HasSuffix(wire[:wn], []byte("\r\n\r\n")) && !bytes.HasSuffix(wire[:wn], []byte("\n\r\n")) {
			t.Fatalf("ended at %d without an empty line: %q", wn, wire[:wn])
		}
	})
}

func TestAppendErrorResponse(t *testing.T) {
	got := string(appendErrorResponse(nil, 503, "service_unavailable", "no_healthy_backend", `a "quoted" msg`, "", true))
	body := `{"error":{"message":"a \"quoted\" msg","type":"service_unavailable","param":null,"code":"no_healthy_backend"}}` + "\n"
	want := fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	if got != want {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
	if !strings.HasPrefix(string(sseBrokenChunk), fmt.Sprintf("%x\r\n", len(sseBrokenEvent))) || !strings.HasSuffix(string(sseBrokenChunk), "\n\n\r\n") {
		t.Fatalf("sse chunk %q", sseBrokenChunk)
	}
}

// The head parsers never panic and only report spans inside their input.
func FuzzParseHeads(f *testing.F) {
	f.Add([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var rq reqHead
		if parseRequestHead(b, &rq) == headOK {
			if rq.size > len(b) {
				t.Fatalf("head size %d > %d", rq.size, len(b))
			}
			for _, sp := range append([]span{rq.method, rq.uri, rq.path, rq.rid}, append(rq.names[:rq.nh], rq.vals[:rq.nh]...)...) {
				if sp.off < 0 || sp.end < sp.off || int(sp.end) > rq.size {
					t.Fatalf("span %v outside the head of %d bytes", sp, rq.size)
				}
			}
		}
		var rs respHead
		if parseResponseHead(b, &rs) == headOK {
			if rs.size > len(b) || rs.status < 0 || rs.status > 999 {
				t.Fatalf("size %d status %d", rs.size, rs.status)
			}
			for _, sp := range append(rs.names[:rs.nh], rs.vals[:rs.nh]...) {
				if sp.off < 0 || sp.end < sp.off || int(sp.end) > rs.size {
					t.Fatalf("span %v outside the head of %d bytes", sp, rs.size)
				}
			}
		}
	})
}
