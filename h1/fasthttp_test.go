package h1

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// FuzzRequestFasthttp checks the acceptance decision against a second,
// unrelated parser, fasthttp's: whatever h1 accepts, fasthttp must read
// as a request with the same method, target and body framing. The head
// is followed by a body of the length h1 decided (an empty chunked body
// for chunked), so that a parser that framed it otherwise would fail to
// read it or read other bytes. (h1 may refuse more.)
func FuzzRequestFasthttp(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\nX: 1\r\n\r\n",
		"GET http://a/b?c HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: \x80\t1\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 007\r\n\r\n",
		"0 * HTTP/1.0\r\n0000:\r\n\r\n",
		"0 / HTTP/1.1\r\nHost:\r\n\r\n",
		"\r\nPUT /a%20b HTTP/1.1\r\nHost: [::1]:80\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Request
		r.Reset()
		if st, _ := ParseRequest(b, &r); st != OK {
			return
		}
		if r.Asterisk && string(r.Method.Of(b)) != "OPTIONS" {
			return // asterisk-form is OPTIONS only (RFC 9112 §3.2.4); the edge answers 400
		}
		if !r.CheckHost(b) {
			return // the edge refuses it (an empty or malformed Host)
		}
		if r.ContentLength > 1<<20 {
			return // accepted, but too large a body to build here
		}
		msg := append([]byte(nil), b[:r.Size]...)
		var body []byte
		switch {
		case r.Chunked:
			msg = append(msg, "0\r\n\r\n"...)
		case r.ContentLength > 0:
			body = bytes.Repeat([]byte("x"), int(r.ContentLength))
			msg = append(msg, body...)
		}
		var req fasthttp.Request
		// fasthttp reads a head only whole from its reader's buffer: one
		// sized to the message, so that the buffer chosen here is no limit
		// h1 is compared with (its own bound on heads is tested apart).
		br := bufio.NewReaderSize(bytes.NewReader(msg), max(len(msg), 4096))
		if err := req.Header.Read(br); err != nil {
			t.Fatalf("h1 accepted a head fasthttp refuses (%v): %q", err, msg)
		}
		cl := req.Header.ContentLength() // before the body is read: the framing the head declares
		if err := req.ContinueReadBody(br, 0); err != nil {
			t.Fatalf("fasthttp cannot read the body h1 framed (%v): %q", err, msg)
		}
		if br.Buffered() > 0 {
			t.Fatalf("fasthttp left %d bytes of the body h1 framed: %q", br.Buffered(), msg)
		}
		if m := string(req.Header.Method()); m != string(r.Method.Of(b)) {
			t.Fatalf("method: fasthttp %q, h1 %q: %q", m, r.Method.Of(b), b)
		}
		if u := string(req.Header.RequestURI()); u != string(r.Target.Of(b)) {
			t.Fatalf("target: fasthttp %q, h1 %q: %q", u, r.Target.Of(b), b)
		}
		switch {
		case r.Chunked && cl != -1:
			t.Fatalf("h1 reads a chunked body, fasthttp Content-Length %d: %q", cl, b)
		case !r.Chunked && r.ContentLength >= 0 && cl != int(r.ContentLength):
			t.Fatalf("h1 reads %d body bytes, fasthttp Content-Length %d: %q", r.ContentLength, cl, b)
		}
		if !bytes.Equal(req.Body(), body) {
			t.Fatalf("body: fasthttp %q, h1 %q: %q", req.Body(), body, b)
		}
		if r.Minor == 1 && !r.Abs && r.Host.Len() > 0 && !strings.EqualFold(string(req.Header.Host()), string(r.Host.Of(b))) {
			t.Fatalf("Host: fasthttp %q, h1 %q: %q", req.Header.Host(), r.Host.Of(b), b)
		}
	})
}
