package tracing

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// receiver is an OTLP/HTTP endpoint on loopback that decodes what the
// exporter sends.
type receiver struct {
	url   string
	mu    sync.Mutex
	spans []*tracepb.Span
	svc   string
	srv   *http.Server
}

func startReceiver(t *testing.T) *receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{url: "http://" + ln.Addr().String() + "/v1/traces"}
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var msg coltrace.ExportTraceServiceRequest
		if err != nil || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &msg) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range msg.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					r.svc = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Write(out)
	})}
	go r.srv.Serve(ln)
	t.Cleanup(func() { r.srv.Close() })
	return r
}

func attrs(s *tracepb.Span) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = v.IntValue
		case *commonpb.AnyValue_DoubleValue:
			m[kv.Key] = v.DoubleValue
		}
	}
	return m
}

func TestSpansReachCollector(t *testing.T) {
	rcv := startReceiver(t)
	tr, err := New(Config{Endpoint: rcv.url, ServiceName: "kvca-test"})
	if err != nil {
		t.Fatal(err)
	}
	const clientTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var r Request
	start := time.Now()
	r.Begin(tr, start, "POST /v1/chat/completions", []byte(clientTP), []byte("congo=t61rcWkgMzE"), []byte("req-1"))
	if !r.Active() {
		t.Fatal("not active with tracing on")
	}
	r.Routed(&Routing{Route: "chat", Model: []byte("llama"), Phase: "follow-up", Backend: "10.0.0.2:8000",
		Cached: 12, Novel: 3, QueueWait: 1500 * time.Microsecond, Tenant: "acme"})
	r.AttemptBegin("10.0.0.2:8000")
	first := string(r.Traceparent())
	r.AttemptEnd(0, errors.New("connection refused"))
	r.AttemptBegin("10.0.0.3:8000")
	head := string(r.AppendHeaders(nil))
	second := string(r.Traceparent())
	r.AttemptEnd(200, nil)
	r.End(200)
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	if !strings.HasPrefix(second, "00-4bf92f3577b34da6a3ce929d0e0e4736-") || !strings.HasSuffix(second, "-01") || first == second {
		t.Fatalf("upstream traceparents %q, %q", first, second)
	}
	if head != "traceparent: "+second+"\r\ntracestate: congo=t61rcWkgMzE\r\n" {
		t.Fatalf("upstream headers %q", head)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if rcv.svc != "kvca-test" || len(rcv.spans) != 3 {
		t.Fatalf("service %q, %d spans", rcv.svc, len(rcv.spans))
	}
	byName := map[string][]*tracepb.Span{}
	for _, s := range rcv.spans {
		byName[s.Name] = append(byName[s.Name], s)
		if hex.EncodeToString(s.TraceId) != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("span %s in trace %x", s.Name, s.TraceId)
		}
	}
	req := byName["POST /v1/chat/completions"]
	ups := byName["upstream"]
	if len(req) != 1 || len(ups) != 2 {
		t.Fatalf("spans by name: %v", byName)
	}
	rs := req[0]
	if hex.EncodeToString(rs.ParentSpanId) != "00f067aa0ba902b7" || rs.Kind != tracepb.Span_SPAN_KIND_SERVER || rs.TraceState != "congo=t61rcWkgMzE" {
		t.Errorf("request span parent %x kind %v tracestate %q", rs.ParentSpanId, rs.Kind, rs.TraceState)
	}
	if rs.StartTimeUnixNano != uint64(start.UnixNano()) {
		t.Errorf("request span starts at %d, want %d", rs.StartTimeUnixNano, start.UnixNano())
	}
	want := map[string]any{"kvca.route": "chat", "gen_ai.request.model": "llama", "kvca.phase": "follow-up",
		"kvca.backend": "10.0.0.2:8000", "kvca.blocks.cached": int64(12), "kvca.blocks.novel": int64(3),
		"kvca.queue_wait_ms": 1.5, "kvca.tenant": "acme", "kvca.attempts": int64(2),
		"http.response.status_code": int64(200), "kvca.request_id": "req-1"}
	got := attrs(rs)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("request span %s = %v, want %v", k, got[k], v)
		}
	}
	for i, u := range ups {
		if string(u.ParentSpanId) != string(rs.SpanId) || u.Kind != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("attempt %d: parent %x kind %v", i, u.ParentSpanId, u.Kind)
		}
		a := attrs(u)
		switch a["kvca.attempt"] {
		case int64(1):
			if a["server.address"] != "10.0.0.2:8000" || u.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR ||
				!strings.HasSuffix(first, hex.EncodeToString(u.SpanId)+"-01") {
				t.Errorf("first attempt: %v status %v id %x (header %s)", a, u.Status, u.SpanId, first)
			}
		case int64(2):
			if a["server.address"] != "10.0.0.3:8000" || a["http.response.status_code"] != int64(200) ||
				!strings.HasSuffix(second, hex.EncodeToString(u.SpanId)+"-01") {
				t.Errorf("second attempt: %v id %x (header %s)", a, u.SpanId, second)
			}
		default:
			t.Errorf("attempt attributes %v", a)
		}
	}
}

// TestNewTrace: without a (valid) client traceparent the request starts a
// trace of its own, which the backend is told of.
func TestNewTrace(t *testing.T) {
	rcv := startReceiver(t)
	tr, err := New(Config{Endpoint: rcv.url})
	if err != nil {
		t.Fatal(err)
	}
	var r Request
	for _, tp := range []string{"", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "garbage"} {
		r.Begin(tr, time.Now(), "POST /v1/responses", []byte(tp), nil, nil)
		r.AttemptBegin("b:1")
		h := r.Traceparent()
		tid, sid, flags, ok := ParseTraceparent(h)
		if !ok || flags != 1 || tid == [16]byte{} || sid == [8]byte{} {
			t.Fatalf("client %q: upstream traceparent %q", tp, h)
		}
		r.AttemptEnd(200, nil)
		r.End(200)
	}
	tr.Shutdown(context.Background())
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	roots := 0
	for _, s := range rcv.spans {
		if s.Name == "POST /v1/responses" && len(s.ParentSpanId) == 0 {
			roots++
		}
	}
	if roots != 3 || rcv.svc != "kvca" {
		t.Fatalf("%d root spans (service %q), want 3", roots, rcv.svc)
	}
}

func TestParseTraceparent(t *testing.T) {
	for _, c := range []struct {
		v  string
		ok bool
	}{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", false},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", false},
	} {
		_, _, _, ok := ParseTraceparent([]byte(c.v))
		if ok != c.ok {
			t.Errorf("%s: %v, want %v", c.v, ok, c.ok)
		}
	}
	tid, sid, fl, _ := ParseTraceparent([]byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	var out [traceparentLen]byte
	formatTraceparent(&out, tid, sid, fl)
	if string(out[:]) != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("round trip %s", out)
	}
}

func TestBadEndpoint(t *testing.T) {
	if tr, err := New(Config{}); tr != nil || err != nil {
		t.Fatal("no endpoint is not off")
	}
	if _, err := New(Config{Endpoint: "127.0.0.1:4318"}); err == nil {
		t.Fatal("an endpoint without a scheme was accepted")
	}
}

// offRequest is one request's calls with tracing off.
func offRequest(r *Request, tp []byte, hdr []byte, d *Routing) []byte {
	r.Begin(nil, time.Time{}, "POST /v1/chat/completions", tp, nil, nil)
	r.Routed(d)
	r.AttemptBegin("b:1")
	hdr = r.AppendHeaders(hdr[:0])
	r.AttemptEnd(200, nil)
	r.End(200)
	return hdr
}

func TestOffAllocatesNothing(t *testing.T) {
	var r Request
	tp := []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	d := &Routing{Route: "chat", Model: []byte("m")}
	var hdr []byte
	if n := testing.AllocsPerRun(100, func() { hdr = offRequest(&r, tp, hdr, d) }); n != 0 || len(hdr) != 0 || r.Active() {
		t.Fatalf("%v allocs, %d header bytes with tracing off", n, len(hdr))
	}
}

func BenchmarkOff(b *testing.B) {
	var r Request
	tp := []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	d := &Routing{Route: "chat", Model: []byte("m")}
	var hdr []byte
	b.ReportAllocs()
	for b.Loop() {
		hdr = offRequest(&r, tp, hdr, d)
	}
}

// BenchmarkOn is the same request traced, exported to a collector on
// loopback, for scale.
func BenchmarkOn(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { io.Copy(io.Discard, req.Body) })}
	go srv.Serve(ln)
	defer srv.Close()
	tr, err := New(Config{Endpoint: "http://" + ln.Addr().String() + "/v1/traces"})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	var r Request
	tp := []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	d := &Routing{Route: "chat", Model: []byte("m"), Phase: "bootstrap", Backend: "b:1"}
	var hdr []byte
	b.ReportAllocs()
	for b.Loop() {
		r.Begin(tr, time.Now(), "POST /v1/chat/completions", tp, nil, nil)
		r.Routed(d)
		r.AttemptBegin("b:1")
		hdr = r.AppendHeaders(hdr[:0])
		r.AttemptEnd(200, nil)
		r.End(200)
	}
}
