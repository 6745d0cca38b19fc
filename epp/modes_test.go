package epp_test

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/kvca/kvca/epp"
	"github.com/kvca/kvca/epp/epptest"
)

var pool = []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}

func newProxy(fallbacks int) *epptest.Proxy {
	p := &epptest.Proxy{Fallbacks: fallbacks}
	_ = p.SetEndpoints(pool)
	return p
}

// FULL_DUPLEX_STREAMED: the headers' answer waits for the whole body and
// carries the pick; the body then comes back byte for byte as streamed
// mutations; the response body is streamed back too.
func TestFullDuplex(t *testing.T) {
	p := startPicker(t, newProxy(1), epp.Config{})
	s := p.open()
	s.send(reqHeaders(modes(epp.ModeFullDuplex, epp.ModeFullDuplex, false), nil, false))
	chunks := []string{`{"model":"m",`, `"messages":[{"role":"user",`, `"content":"hi"}]}`}
	for i, c := range chunks {
		s.send(reqBody(c, i == len(chunks)-1))
	}
	r := s.recv()
	h := r.GetRequestHeaders()
	if h == nil {
		t.Fatalf("first answer %T, want request headers", r.GetResponse())
	}
	dest := destination(t, r, h.GetResponse())
	eps := strings.Split(dest, ",")
	if len(eps) != 2 || !slices.Contains(pool, eps[0]) || !slices.Contains(pool, eps[1]) || eps[0] == eps[1] {
		t.Fatalf("pick %q: want a primary and a distinct fallback of the pool", dest)
	}
	if !h.GetResponse().GetClearRouteCache() {
		t.Error("pick without clear_route_cache")
	}
	var back []byte
	for i := range chunks {
		sb := s.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sb == nil {
			t.Fatalf("body answer %d: no streamed response", i)
		}
		back = append(back, sb.GetBody()...)
		if sb.GetEndOfStream() != (i == len(chunks)-1) {
			t.Errorf("body answer %d: end_of_stream %v", i, sb.GetEndOfStream())
		}
	}
	if want := strings.Join(chunks, ""); string(back) != want {
		t.Fatalf("body streamed back %q, want %q", back, want)
	}

	s.send(respHeaders(eps[1], false))
	rh := s.recv().GetResponseHeaders()
	if rh == nil {
		t.Fatal("no response headers answer")
	}
	added := rh.GetResponse().GetHeaderMutation().GetSetHeaders()
	if len(added) != 1 || added[0].GetHeader().GetKey() != "x-epptest-served" || string(added[0].GetHeader().GetRawValue()) != eps[1] {
		t.Fatalf("response headers mutation %v, want the lifecycle's x-epptest-served: %s", added, eps[1])
	}
	for i, c := range []string{"data: a\n\n", "data: [DONE]\n\n"} {
		s.send(respBody(c, i == 1))
		sb := s.recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if string(sb.GetBody()) != c || sb.GetEndOfStream() != (i == 1) {
			t.Fatalf("response chunk %d streamed back as %q end %v", i, sb.GetBody(), sb.GetEndOfStream())
		}
	}
	if err := s.c.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.Recv(); err != io.EOF {
		t.Fatalf("stream end: %v, want EOF", err)
	}
	snap := waitEnded(t, onlyExchange(t, p.proxy))
	if string(snap.Body) != strings.Join(chunks, "") || snap.BodyCalls != 3 || !snap.BodyEnd {
		t.Errorf("lifecycle body %q in %d calls end %v", snap.Body, snap.BodyCalls, snap.BodyEnd)
	}
	if snap.Headers[":path"] != "/v1/chat/completions" {
		t.Errorf("lifecycle headers %v", snap.Headers)
	}
	if snap.Subset != nil {
		t.Errorf("subset %v without a hint, want nil", snap.Subset)
	}
	if snap.Status != 200 || snap.Served != eps[1] || string(snap.RespBody) != "data: a\n\ndata: [DONE]\n\n" || !snap.RespEnd {
		t.Errorf("lifecycle response: %d served %q body %q end %v", snap.Status, snap.Served, snap.RespBody, snap.RespEnd)
	}
	if snap.Ends != 1 || snap.Cancelled {
		t.Errorf("End called %d times, cancelled %v; want once, false", snap.Ends, snap.Cancelled)
	}
}

// A chunk over 64 KiB goes back in pieces Envoy accepts, the same bytes.
func TestFullDuplexSplitsLargeChunks(t *testing.T) {
	p := startPicker(t, newProxy(0), epp.Config{})
	s := p.open()
	body := bytes.Repeat([]byte("0123456789"), 15000)
	s.send(reqHeaders(nil, nil, false)) // no protocol config: full duplex assumed
	s.send(reqBody(string(body), true))
	r := s.recv()
	destination(t, r, r.GetRequestHeaders().GetResponse())
	var back []byte
	for n := 0; ; n++ {
		sb := s.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if len(sb.GetBody()) > 64<<10 {
			t.Fatalf("piece %d of %d bytes", n, len(sb.GetBody()))
		}
		back = append(back, sb.GetBody()...)
		if sb.GetEndOfStream() {
			break
		}
		if n > 10 {
			t.Fatal("no end of stream")
		}
	}
	if !bytes.Equal(back, body) {
		t.Fatalf("%d bytes back, want the %d sent", len(back), len(body))
	}
}

// Trailers end the body: the pick comes at the trailers, the body goes
// back without end of stream, the trailers get their answer.
func TestFullDuplexTrailers(t *testing.T) {
	p := startPicker(t, newProxy(0), epp.Config{})
	s := p.open()
	s.send(reqHeaders(modes(epp.ModeFullDuplex, epp.ModeFullDuplex, false), nil, false))
	s.send(reqBody("{}", false))
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}})
	r := s.recv()
	destination(t, r, r.GetRequestHeaders().GetResponse())
	sb := s.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
	if string(sb.GetBody()) != "{}" || sb.GetEndOfStream() {
		t.Fatalf("body back %q end %v; want {} without end", sb.GetBody(), sb.GetEndOfStream())
	}
	if s.recv().GetRequestTrailers() == nil {
		t.Fatal("no trailers answer")
	}
	snap := onlyExchange(t, p.proxy).Snapshot()
	if string(snap.Body) != "{}" || !snap.BodyEnd {
		t.Fatalf("lifecycle body %q end %v", snap.Body, snap.BodyEnd)
	}
}

// BUFFERED: Envoy waits for the headers' answer before sending the body,
// and holds the headers until the body's answer, which carries the pick.
func TestBuffered(t *testing.T) {
	p := startPicker(t, newProxy(0), epp.Config{})
	s := p.open()
	s.send(reqHeaders(modes(epp.ModeBuffered, epp.ModeBuffered, false), nil, false))
	if h := s.recv().GetRequestHeaders(); h == nil || h.GetResponse().GetHeaderMutation() != nil {
		t.Fatalf("headers answer %v, want an empty one", h)
	}
	s.send(reqBody(`{"model":"m"}`, true))
	r := s.recv()
	b := r.GetRequestBody()
	if b == nil {
		t.Fatalf("body answer %T", r.GetResponse())
	}
	dest := destination(t, r, b.GetResponse())
	if b.GetResponse().GetBodyMutation() != nil {
		t.Error("buffered body answer mutates the body")
	}
	s.send(respHeaders(dest, false))
	s.recv()
	s.send(respBody("whole answer", true))
	if rb := s.recv().GetResponseBody(); rb == nil || rb.GetResponse().GetBodyMutation() != nil {
		t.Fatalf("response body answer %v, want an empty one", rb)
	}
	snap := waitEnded(t, onlyExchange(t, p.proxy))
	if snap.Ends != 1 || snap.Cancelled || string(snap.RespBody) != "whole answer" || snap.Served != dest {
		t.Fatalf("exchange %+v", snap)
	}
}

// STREAMED with the body sent before the headers' answer: the pick on
// the whole body, then one plain answer per chunk.
func TestStreamedWithoutWaiting(t *testing.T) {
	p := startPicker(t, newProxy(0), epp.Config{})
	s := p.open()
	s.send(reqHeaders(modes(epp.ModeStreamed, epp.ModeStreamed, true), nil, false))
	s.send(reqBody(`{"model":`, false))
	s.send(reqBody(`"m"}`, true))
	r := s.recv()
	destination(t, r, r.GetRequestHeaders().GetResponse())
	for i := range 2 {
		if b := s.recv().GetRequestBody(); b == nil || b.GetResponse().GetBodyMutation() != nil {
			t.Fatalf("chunk %d answer %v, want a plain body answer", i, b)
		}
	}
	s.send(respHeaders("", false))
	s.recv()
	s.send(respBody("a", false))
	s.recv()
	s.send(respBody("b", true))
	s.recv()
	snap := waitEnded(t, onlyExchange(t, p.proxy))
	if string(snap.Body) != `{"model":"m"}` || string(snap.RespBody) != "ab" || snap.Ends != 1 || snap.Cancelled || snap.Served != "" {
		t.Fatalf("exchange %+v", snap)
	}
}

// STREAMED with Envoy waiting for the headers' answer: the pick is made
// on the headers alone (the body has not come) and the chunks acked.
func TestStreamedWaiting(t *testing.T) {
	p := startPicker(t, newProxy(0), epp.Config{})
	s := p.open()
	s.send(reqHeaders(modes(epp.ModeStreamed, epp.ModeNone, false), nil, false))
	r := s.recv()
	destination(t, r, r.GetRequestHeaders().GetResponse())
	s.send(reqBody("{}", true))
	if s.recv().GetRequestBody() == nil {
		t.Fatal("no body answer")
	}
	// Response body mode NONE: the response headers are the last message.
	s.send(respHeaders("", false))
	s.recv()
	if err := s.c.CloseSend(); err != nil {
		t.Fatal(err)
	}
	snap := waitEnded(t, onlyExchange(t, p.proxy))
	if snap.BodyCalls != 1 || len(snap.Body) != 0 || !snap.BodyEnd || snap.Ends != 1 || snap.Cancelled {
		t.Fatalf("exchange %+v", snap)
	}
}

// A request without a body is picked on its headers.
func TestHeadersOnly(t *testing.T) {
	p := startPicker(t, newProxy(0), epp.Config{})
	s := p.open()
	s.send(reqHeaders(modes(epp.ModeFullDuplex, epp.ModeFullDuplex, false), nil, true))
	r := s.recv()
	destination(t, r, r.GetRequestHeaders().GetResponse())
	s.send(respHeaders("", true))
	s.recv()
	snap := waitEnded(t, onlyExchange(t, p.proxy))
	if !snap.BodyEnd || !snap.RespEnd || snap.Ends != 1 || snap.Cancelled {
		t.Fatalf("exchange %+v", snap)
	}
}
