package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func parseAll(s string) (*Request, int, *Error) {
	var r Request
	r.Reset()
	st, err := ParseRequest([]byte(s), &r)
	return &r, st, err
}

func TestParseRequestAccepts(t *testing.T) {
	const head = "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: kvca.example:8080\r\nContent-Length: 13\r\n" +
		"X-Forwarded-For: 10.0.0.1\r\nX-Request-Id:  abc \r\nConnection: keep-alive, Close, X-Secret\r\n\r\n"
	b := []byte(head + `{"model":"m"}`)
	var r Request
	r.Reset()
	// Byte by byte, as a slow client sends it: More until the blank line.
	for i := 1; i < len(head); i++ {
		if st, err := ParseRequest(b[:i], &r); st != More {
			t.Fatalf("prefix %d: %d %v", i, st, err)
		}
	}
	if st, err := ParseRequest(b, &r); st != OK {
		t.Fatalf("parse: %d %v", st, err)
	}
	if r.Size != len(head) || string(r.Method.Of(b)) != "POST" || string(r.URI.Of(b)) != "/v1/chat/completions?x=1" ||
		string(r.Path.Of(b)) != "/v1/chat/completions" || string(r.Host.Of(b)) != "kvca.example:8080" {
		t.Fatalf("head: size %d method %q uri %q path %q host %q", r.Size, r.Method.Of(b), r.URI.Of(b), r.Path.Of(b), r.Host.Of(b))
	}
	if r.Minor != 1 || r.ContentLength != 13 || !r.Close || r.Chunked || r.ExpectContinue || r.NF != 5 {
		t.Fatalf("flags: minor %d CL %d close %v chunked %v nf %d", r.Minor, r.ContentLength, r.Close, r.Chunked, r.NF)
	}
	if r.NN != 3 || !r.IsNominated(b, []byte("x-secret")) || !r.IsNominated(b, []byte("Keep-Alive")) || r.IsNominated(b, []byte("host")) {
		t.Fatalf("nominated: %d", r.NN)
	}

	for _, tc := range []struct {
		name, head string
		check      func(*Request, []byte) bool
	}{
		{"HTTP/1.0 without Host closes", "GET / HTTP/1.0\r\n\r\n", func(r *Request, _ []byte) bool { return r.Minor == 0 && r.Close }},
		{"HTTP/1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", func(r *Request, _ []byte) bool { return !r.Close }},
		{"HTTP/1.0 Expect ignored", "POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", func(r *Request, _ []byte) bool { return !r.ExpectContinue }},
		{"chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n", func(r *Request, _ []byte) bool { return r.Chunked && r.ContentLength < 0 }},
		{"expect", "POST / HTTP/1.1\r\nHost: a\r\nexpect: 100-Continue\r\nContent-Length: 5\r\n\r\n", func(r *Request, _ []byte) bool { return r.ExpectContinue }},
		{"absolute form", "GET http://other.example:81/v1/models?a=b HTTP/1.1\r\nHost: a\r\n\r\n", func(r *Request, b []byte) bool {
			return r.Abs && string(r.URI.Of(b)) == "/v1/models?a=b" && string(r.Path.Of(b)) == "/v1/models"
		}},
		{"absolute form without path", "GET https://x HTTP/1.1\r\nHost: a\r\n\r\n", func(r *Request, b []byte) bool { return r.Abs && r.URI.Len() == 0 }},
		{"asterisk", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", func(r *Request, _ []byte) bool { return r.Asterisk }},
		{"leading blank lines", "\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", func(r *Request, b []byte) bool { return string(r.Method.Of(b)) == "GET" }},
		{"empty Host parses, CheckHost refuses it", "GET / HTTP/1.1\r\nHost:\r\n\r\n", func(r *Request, b []byte) bool { return !r.CheckHost(b) }},
		{"obs-text and tab in a value", "GET / HTTP/1.1\r\nHost: a\r\nX-Name: caf\xc3\xa9\tb\r\n\r\n", func(r *Request, _ []byte) bool { return r.NF == 2 }},
		{"percent-encoding", "GET /a%20b?c=%2F HTTP/1.1\r\nHost: a\r\n\r\n", func(r *Request, _ []byte) bool { return true }},
		{"IPv6 host", "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", func(r *Request, b []byte) bool { return r.CheckHost(b) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, st, err := parseAll(tc.head)
			if st != OK {
				t.Fatalf("%d %v", st, err)
			}
			if !tc.check(r, []byte(tc.head)) {
				t.Fatalf("unexpected parse of %q", tc.head)
			}
		})
	}
}

// TestParseRequestRefuses is the acceptance policy: every head here is
// refused with exactly this answer.
func TestParseRequestRefuses(t *testing.T) {
	long := "GET /" + strings.Repeat("a", MaxHeadBytes) + " HTTP/1.1\r\nHost: a\r\n\r\n"
	many := "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("A: b\r\n", MaxFields) + "\r\n"
	for _, tc := range []struct {
		name, head string
		want       *Error
	}{
		{"bare LF", "GET / HTTP/1.1\nHost: a\n\n", ErrBareLF},
		{"bare LF in a field", "GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n", ErrBareLF},
		{"bare CR before the end", "GET / HTTP/1.1\r\nX-Request-Id: abc\rSet-Cookie: x=1\r\n", ErrBareCR},
		{"bare CR, head incomplete", "GET / HTTP/1.1\r\nX: a\rb", ErrBareCR},
		{"NUL in a value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", ErrFieldValue},
		{"NUL, head incomplete", "GET / HTTP/1.1\r\nX: a\x00", ErrFieldValue},
		{"DEL in a value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n", ErrFieldValue},
		{"control byte in the target", "GET /a\x01b HTTP/1.1\r\nHost: a\r\n\r\n", ErrTarget},
		{"space in the target", "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", ErrRequestLine},
		{"non-ASCII target", "GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", ErrTarget},
		{"bad percent", "GET /a%zz HTTP/1.1\r\nHost: a\r\n\r\n", ErrTarget},
		{"fragment", "GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n", ErrTarget},
		{"relative target", "GET a/b HTTP/1.1\r\nHost: a\r\n\r\n", ErrTarget},
		{"absolute form, other scheme", "GET ftp://a/ HTTP/1.1\r\nHost: a\r\n\r\n", ErrTarget},
		{"absolute form, bad authority", "GET http://a b/ HTTP/1.1\r\nHost: a\r\n\r\n", ErrRequestLine},
		{"absolute form, pct-encoded authority", "GET http://%00 HTTP/1.0\r\n\r\n", ErrTarget},
		{"absolute form, pct-encoded authority byte", "GET http://a%41b/ HTTP/1.1\r\nHost: a\r\n\r\n", ErrTarget},
		{"two spaces", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", ErrRequestLine},
		{"no version", "GET /\r\nHost: a\r\n\r\n", ErrRequestLine},
		{"lower-case version", "GET / http/1.1\r\nHost: a\r\n\r\n", ErrRequestLine},
		{"method not a token", "G(T / HTTP/1.1\r\nHost: a\r\n\r\n", ErrRequestLine},
		{"HTTP/1.2", "GET / HTTP/1.2\r\nHost: a\r\n\r\n", ErrVersion},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", ErrVersion},
		{"asterisk, not OPTIONS", "GET * HTTP/1.1\r\nHost: a\r\n\r\n", ErrTarget},
		{"HTTP/0.9 style", "GET / HTTP/0.9\r\n\r\n", ErrVersion},
		{"space in a name", "GET / HTTP/1.1\r\nHost: a\r\nX Y: b\r\n\r\n", ErrFieldName},
		{"space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", ErrFieldName},
		{"empty name", "GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n", ErrFieldName},
		{"no colon", "GET / HTTP/1.1\r\nHost: a\r\nbroken\r\n\r\n", ErrFieldName},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", ErrObsFold},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", ErrNoHost},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", ErrTwoHosts},
		{"two Hosts in 1.0", "GET / HTTP/1.0\r\nHost: a\r\nhost: a\r\n\r\n", ErrTwoHosts},
		{"signed length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n", ErrLength},
		{"length list", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 1\r\n\r\n", ErrLength},
		{"huge length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1234567890123456\r\n\r\n", ErrLength},
		{"two lengths", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", ErrTwoLengths},
		{"length and chunked", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", ErrLengthAndTE},
		{"chunked then length", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", ErrLengthAndTE},
		{"chunked in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", ErrTEVersion},
		{"chunked not last", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", ErrChunkedNotLast},
		{"chunked twice", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", ErrChunkedNotLast},
		{"identity", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", ErrChunkedNotLast},
		{"empty coding", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \r\n\r\n", ErrChunkedNotLast},
		{"gzip before chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", ErrCoding},
		{"other expectation", "POST / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\n", ErrExpect},
		{"Connection option not a token", "GET / HTTP/1.1\r\nHost: a\r\nConnection: a b\r\n\r\n", ErrConnection},
		{"head too large", long, ErrTooLarge},
		{"too many fields", many, ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, st, err := parseAll(tc.head)
			if st != Bad || err != tc.want {
				t.Fatalf("got %d %v, want %v", st, err, tc.want)
			}
		})
	}
	// An endless head with no line end is refused at the limit.
	if _, st, err := parseAll("GET /" + strings.Repeat("a", MaxHeadBytes+1)); st != Bad || err != ErrTooLarge {
		t.Fatalf("endless line: %d %v", st, err)
	}
	if r, st, _ := parseAll("GET / HTTP/1.1\r\nHost: a b\r\n\r\n"); st != OK || r.CheckHost([]byte("GET / HTTP/1.1\r\nHost: a b\r\n\r\n")) {
		t.Fatal("a Host with a space must fail CheckHost")
	}
}

func TestParseResponse(t *testing.T) {
	var r Response
	for _, tc := range []struct {
		head    string
		status  int
		framing int
		close   bool
		sse     bool
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", 200, BodyFixed, false, false},
		{"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n", 200, BodyChunked, false, true},
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 200, BodyChunked, true, false},
		{"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", 200, BodyUntilClose, true, false},
		{"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", 200, BodyNone, true, false},
		{"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n", 200, BodyFixed, false, false},
		{"HTTP/1.1 204 No Content\r\n\r\n", 204, BodyNone, false, false},
		{"HTTP/1.1 429\r\nContent-Length: 0\r\n\r\n", 429, BodyNone, false, false},
	} {
		if st, err := ParseResponse([]byte(tc.head), &r); st != OK {
			t.Fatalf("%q: %d %v", tc.head, st, err)
		}
		if r.Status != tc.status || r.Framing(false) != tc.framing || r.Close != tc.close || r.SSE != tc.sse || r.Size != len(tc.head) {
			t.Errorf("%q: status %d framing %d close %v sse %v size %d", tc.head, r.Status, r.Framing(false), r.Close, r.SSE, r.Size)
		}
	}
	for _, bad := range []string{
		"HTTP/2 200\r\n\r\n",
		"HTTP/1.1 2x0 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.1 200 OK\r\n folded\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-Request-Id: a\rSet-Cookie: x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX Y: a\r\n\r\n",
		"HTTP/1.1 200 OK\nX: a\r\n\r\n",
	} {
		if st, _ := ParseResponse([]byte(bad), &r); st != Bad {
			t.Errorf("%q: %d, want Bad", bad, st)
		}
	}
	if st, _ := ParseResponse([]byte("HTTP/1.1 200 OK\r\nContent-Le"), &r); st != More {
		t.Errorf("partial: %d", st)
	}
	h := "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Internal\r\nX-Internal: 1\r\n\r\n"
	if st, _ := ParseResponse([]byte(h), &r); st != OK || !r.IsNominated([]byte(h), []byte("x-internal")) {
		t.Fatalf("nominated: %d %d", st, r.NN)
	}
}

func chunked(pieces ...string) string {
	var b strings.Builder
	for i, p := range pieces {
		if i%2 == 1 {
			fmt.Fprintf(&b, "%X;ext=1\r\n%s\r\n", len(p), p)
		} else {
			fmt.Fprintf(&b, "%x\r\n%s\r\n", len(p), p)
		}
	}
	b.WriteString("0\r\nX-Trailer: 1\r\n\r\n")
	return b.String()
}

func TestChunkStepDecodes(t *testing.T) {
	body := chunked("hello ", strings.Repeat("x", 300), "!")
	want := "hello " + strings.Repeat("x", 300) + "!"
	// Every split of the body into two pieces decodes the same data.
	for cut := 0; cut <= len(body); cut++ {
		var s ChunkScan
		var got []byte
		done := false
		for _, p := range [][]byte{[]byte(body[:cut]), []byte(body[cut:])} {
			for len(p) > 0 && !done {
				n, data, d, err := s.Step(p)
				if err != nil {
					t.Fatalf("cut %d: %v", cut, err)
				}
				if data {
					got = append(got, p[:n]...)
				}
				p, done = p[n:], d
			}
		}
		if !done || string(got) != want {
			t.Fatalf("cut %d: done %v got %q", cut, done, got)
		}
	}
	var s ChunkScan
	if n, done, err := s.Scan([]byte(body + "GET /")); err != nil || !done || n != len(body) {
		t.Fatalf("scan: %d %v %v", n, done, err)
	}
	for _, bad := range []string{"x\r\n", "5\nhello\r\n", "\r\n", "3\r\nabcX", "0\r\nX: a\nb\r\n\r\n", "1234567890123456\r\n"} {
		var s ChunkScan
		if _, _, err := s.Scan([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzRequestDifferential checks the acceptance decision against Go's
// net/http parser: whatever h1 accepts, net/http must accept too, with
// the same method, target and body framing. (h1 may refuse more.)
func FuzzRequestDifferential(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET http://a/b?c HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: \x80\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
		"0 http://%00 HTTP/1.0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Request
		r.Reset()
		st, _ := ParseRequest(b, &r)
		if st != OK {
			return
		}
		// Blank lines before the request line are ignored by h1 (RFC 9112
		// §2.2 asks it to) and not by net/http.
		lead := b
		for bytes.HasPrefix(lead, []byte("\r\n")) {
			lead = lead[2:]
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(lead)))
		if err != nil {
			t.Fatalf("h1 accepted what net/http refuses (%v): %q", err, b)
		}
		if req.Method != string(r.Method.Of(b)) || req.RequestURI != string(r.Target.Of(b)) {
			t.Fatalf("request line differs: %q %q vs %q %q", req.Method, req.RequestURI, r.Method.Of(b), r.Target.Of(b))
		}
		chunked := len(req.TransferEncoding) > 0 && req.TransferEncoding[0] == "chunked"
		if chunked != r.Chunked || (!r.Chunked && r.ContentLength >= 0 && req.ContentLength != r.ContentLength) {
			t.Fatalf("framing differs: net/http TE %v CL %d, h1 chunked %v CL %d: %q", req.TransferEncoding, req.ContentLength, r.Chunked, r.ContentLength, b)
		}
		if r.Minor == 1 && req.Host == "" && r.Host.Len() > 0 && !r.Abs {
			t.Fatalf("host differs: %q", b)
		}
	})
}

// TestParseResponseReused: a Response parsed before holds nothing of the
// earlier answer.
func TestParseResponseReused(t *testing.T) {
	t.Parallel()
	var r Response
	first := "HTTP/1.0 201 Created\r\nConnection: keep-alive, X-A\r\nX-Request-Id: q\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	if st, err := ParseResponse([]byte(first), &r); st != OK {
		t.Fatalf("first: %d %v", st, err)
	}
	if !r.Chunked || !r.SSE || !r.RequestID || r.NN != 2 || r.NF != 4 || r.Reason.Len() != 7 || r.Minor != 0 {
		t.Fatalf("first: %+v", r)
	}
	second := "HTTP/1.1 200\r\nContent-Length: 3\r\n\r\n"
	if st, err := ParseResponse([]byte(second), &r); st != OK {
		t.Fatalf("second: %d %v", st, err)
	}
	if r.Size != len(second) || r.Status != 200 || r.Minor != 1 || r.Reason != (Span{}) || r.ContentLength != 3 ||
		r.Chunked || r.Close || r.SSE || r.RequestID || r.NF != 1 || r.NN != 0 || r.Framing(false) != BodyFixed {
		t.Fatalf("second: %+v", r)
	}
}
