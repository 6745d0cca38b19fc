package edge

import (
	"bufio"
	"bytes"
	"io"
	"testing"

	"github.com/valyala/fasthttp"
)

// FuzzRelay: an upstream's response body is untrusted bytes. Whatever the
// framing claims, relaying never panics, never hangs, and never writes
// more than it read.
func FuzzRelay(f *testing.F) {
	f.Add(byte(0), []byte("5\r\nhello\r\n0\r\n\r\n"))
	f.Add(byte(0), []byte("a;ext=1\r\ndata: {}\n\n\r\n0\r\nTrailer: x\r\n\r\n"))
	f.Add(byte(0), []byte("ffffffffffffffff\r\n"))
	f.Add(byte(1), []byte("hello world"))
	f.Add(byte(2), []byte("until the connection closes"))
	f.Fuzz(func(t *testing.T, mode byte, body []byte) {
		var h fasthttp.ResponseHeader
		h.SetStatusCode(200)
		h.SetContentType("text/event-stream")
		switch mode % 3 {
		case 0:
			h.SetContentLength(-1)
		case 1:
			h.SetContentLength(len(body) / 2)
		case 2:
			h.SetContentLength(-2)
		}
		s := &Server{cfg: DefaultConfig()}
		c := &call{s: s}
		r := &c.rel
		r.c = c
		r.start(nil, nil, bufio.NewReaderSize(bytes.NewReader(body), 64), &h, false, nil)
		var out bytes.Buffer
		n, _ := r.WriteTo(&out)
		if n > int64(len(body)) || out.Len() > len(body)+len(sseBrokenEvent) {
			t.Fatalf("relayed %d (%d written) from %d bytes", n, out.Len(), len(body))
		}
		_, _ = io.Copy(io.Discard, r)
	})
}
