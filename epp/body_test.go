package epp_test

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"

	"github.com/kvca/kvca/epp"
)

// bodyOf is a JSON request body of about n bytes.
func bodyOf(n int) []byte {
	pad := bytes.Repeat([]byte("abcdefghij"), n/10)
	return fmt.Appendf(nil, `{"model":"m","messages":[{"role":"user","content":"%s"}]}`, pad)
}

// fullDuplex sends body in chunks of the sizes given (the last one takes
// the rest) with a Content-Length of length (0: none), and returns the
// body streamed back and what the lifecycle took.
func fullDuplex(t *testing.T, body []byte, length int, sizes ...int) (back []byte, lifecycle []byte, calls, pieces int) {
	t.Helper()
	p := startPicker(t, newProxy(0), epp.Config{})
	s := p.open()
	var kv []string
	if length > 0 {
		kv = []string{"content-length", strconv.Itoa(length)}
	}
	s.send(reqHeaders(modes(epp.ModeFullDuplex, epp.ModeFullDuplex, false), nil, false, kv...))
	rest := body
	for i := 0; len(rest) > 0; i++ {
		n := len(rest)
		if i < len(sizes) && sizes[i] < n {
			n = sizes[i]
		}
		s.send(reqBody(string(rest[:n]), n == len(rest)))
		rest = rest[n:]
	}
	r := s.recv()
	destination(t, r, r.GetRequestHeaders().GetResponse())
	for n := 0; ; n++ {
		sb := s.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if len(sb.GetBody()) > 64<<10 {
			t.Fatalf("piece %d of %d bytes", n, len(sb.GetBody()))
		}
		back = append(back, sb.GetBody()...)
		pieces++
		if sb.GetEndOfStream() {
			break
		}
		if n > 100 {
			t.Fatal("no end of stream")
		}
	}
	s.cancel()
	snap := waitEnded(t, onlyExchange(t, p.proxy))
	if !snap.BodyEnd {
		t.Error("the lifecycle's body did not end")
	}
	return back, snap.Body, snap.BodyCalls, pieces
}

// With a Content-Length, the chunks are put together as they come and
// the lifecycle takes the body in one piece; the same bytes go back, in
// as few pieces as Envoy takes rather than cut where the chunks came.
func TestFullDuplexBodyInOnePiece(t *testing.T) {
	body := bodyOf(300 << 10)
	back, got, calls, pieces := fullDuplex(t, body, len(body), 64<<10, 64<<10, 64<<10, 64<<10)
	if want := (len(body) + 61999) / 62000; pieces != want {
		t.Errorf("the body came back in %d pieces, want %d", pieces, want)
	}
	if !bytes.Equal(back, body) || !bytes.Equal(got, body) {
		t.Fatalf("%d bytes back, lifecycle %d, want the %d sent", len(back), len(got), len(body))
	}
	if calls != 1 {
		t.Errorf("the lifecycle took the body in %d calls, want 1", calls)
	}
}

// A Content-Length far beyond the first chunk gets no buffer made ahead
// (a client would make the picker hold what it has not sent): the body
// goes chunk by chunk, as without a length.
func TestFullDuplexBodyLengthBeyondBound(t *testing.T) {
	body := bodyOf(100 << 10)
	back, got, calls, _ := fullDuplex(t, body, len(body), 1000, 50<<10)
	if !bytes.Equal(back, body) || !bytes.Equal(got, body) {
		t.Fatalf("%d bytes back, lifecycle %d, want the %d sent", len(back), len(got), len(body))
	}
	if calls != 3 {
		t.Errorf("the lifecycle took the body in %d calls, want 3", calls)
	}
}

// A body longer than its Content-Length said: what the buffer holds goes
// first, then the chunks beyond it, in order.
func TestFullDuplexBodyOutgrowsLength(t *testing.T) {
	body := bodyOf(200 << 10)
	back, got, calls, _ := fullDuplex(t, body, 100<<10, 40<<10, 40<<10, 40<<10, 40<<10)
	if !bytes.Equal(back, body) || !bytes.Equal(got, body) {
		t.Fatalf("%d bytes back, lifecycle %d, want the %d sent", len(back), len(got), len(body))
	}
	// The buffer's two chunks in one piece, then three chunks.
	if calls != 4 {
		t.Errorf("the lifecycle took the body in %d calls, want 4", calls)
	}
}
