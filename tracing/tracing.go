// Package tracing records a span per proxied request, with the routing
// decision, and one per upstream attempt, exported with OpenTelemetry's
// OTLP/HTTP exporter; it carries W3C trace context from the client to the
// backend. Its API suits an event loop: a Request is a plain value the
// edge keeps with the request, fed by begin/end calls with plain values,
// no context.Context to thread through. Off (a nil *Tracer) every call is
// a branch on a bool and allocates nothing.
package tracing

import (
	"context"
	"errors"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// Config configures tracing; the zero value (no Endpoint) is off.
type Config struct {
	// Endpoint is the OTLP/HTTP traces URL, such as
	// http://127.0.0.1:4318/v1/traces (the path defaults to /v1/traces).
	Endpoint string
	// Headers are sent with every export (for a collector's auth token).
	Headers map[string]string
	// ServiceName is the service.name resource attribute; default "kvca".
	ServiceName string
	// SampleRatio is the share of traces recorded that do not come from a
	// client that already decided (its traceparent's sampled flag is
	// followed); 0 means 1 (all).
	SampleRatio float64
	// Version is the service.version resource attribute.
	Version string
}

// Tracer exports spans; nil is off.
type Tracer struct {
	tp *sdktrace.TracerProvider
	tr trace.Tracer
}

// New starts a Tracer, or returns nil (off) when cfg has no Endpoint.
// Spans are exported in batches by a goroutine of the SDK: ending a span
// only enqueues it, and when the queue is full spans are dropped rather
// than waited for.
func New(cfg Config) (*Tracer, error) {
	if cfg.Endpoint == "" {
		return nil, nil
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("tracing: the OTLP endpoint must be an http:// or https:// URL, such as http://127.0.0.1:4318/v1/traces")
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(cfg.Endpoint)}
	if u.Path == "" || u.Path == "/" {
		opts = append(opts, otlptracehttp.WithURLPath("/v1/traces"))
	}
	if len(cfg.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
	}
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, err
	}
	name := cfg.ServiceName
	if name == "" {
		name = "kvca"
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(name)}
	if cfg.Version != "" {
		attrs = append(attrs, semconv.ServiceVersion(cfg.Version))
	}
	ratio := cfg.SampleRatio
	if ratio <= 0 || ratio > 1 {
		ratio = 1
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
	)
	return &Tracer{tp: tp, tr: tp.Tracer("github.com/kvca/kvca/tracing")}, nil
}

// Shutdown exports what is pending and stops; call it after the server
// has drained.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// Request is one request's tracing state. Keep it with the request (it is
// reusable: Begin resets it) and call, in order: Begin when the head is
// parsed, Routed when the scheduler chose, for each upstream attempt
// AttemptBegin, AppendHeaders (into the upstream head) and AttemptEnd,
// and End when the answer is over.
type Request struct {
	on       bool
	t        *Tracer
	ctx      context.Context
	span     trace.Span
	attempt  trace.Span
	attempts int
	inAtt    bool
	hdr      [traceparentLen]byte
	state    []byte
}

// Routing is the scheduler's decision, as the request span records it.
type Routing struct {
	Route     string // chat, completions, responses, messages, ...
	Model     []byte
	Phase     string // bootstrap, follow-up, fallback, ...
	Backend   string // host:port
	Cached    int    // blocks found cached on the backend
	Novel     int    // blocks it must prefill
	QueueWait time.Duration
	Tenant    string
}

// Attribute keys.
const (
	AttrRoute     = attribute.Key("kvca.route")
	AttrModel     = attribute.Key("gen_ai.request.model")
	AttrPhase     = attribute.Key("kvca.phase")
	AttrBackend   = attribute.Key("kvca.backend")
	AttrCached    = attribute.Key("kvca.blocks.cached")
	AttrNovel     = attribute.Key("kvca.blocks.novel")
	AttrQueueWait = attribute.Key("kvca.queue_wait_ms")
	AttrAttempts  = attribute.Key("kvca.attempts")
	AttrAttempt   = attribute.Key("kvca.attempt")
	AttrTenant    = attribute.Key("kvca.tenant")
	AttrStatus    = attribute.Key("http.response.status_code")
	AttrServer    = attribute.Key("server.address")
	AttrRequestID = attribute.Key("kvca.request_id")
)

// Active reports whether the request is traced: then the edge must drop
// the client's traceparent and tracestate from the upstream head and put
// AppendHeaders' instead. Off, the client's headers pass through as any
// other.
func (r *Request) Active() bool { return r.on }

// Begin starts the request's span at start, as a child of the client's
// trace context when traceparent is valid (tracestate kept with it),
// else as the root of a new trace. name is the span's name (such as
// "POST /v1/chat/completions"); requestID, if any, is recorded.
func (r *Request) Begin(t *Tracer, start time.Time, name string, traceparent, tracestate, requestID []byte) {
	r.on = false
	if t != nil {
		r.begin(t, start, name, traceparent, tracestate, requestID)
	}
}

func (r *Request) begin(t *Tracer, start time.Time, name string, traceparent, tracestate, requestID []byte) {
	*r = Request{on: true, t: t, state: r.state[:0]}
	ctx := context.Background()
	if tid, sid, flags, ok := ParseTraceparent(traceparent); ok {
		cfg := trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags), Remote: true}
		if len(tracestate) > 0 && len(tracestate) <= 512 {
			if ts, err := trace.ParseTraceState(string(tracestate)); err == nil {
				cfg.TraceState = ts
				r.state = append(r.state, tracestate...)
			}
		}
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(cfg))
	}
	r.ctx, r.span = t.tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start))
	if len(requestID) > 0 && r.span.IsRecording() {
		r.span.SetAttributes(AttrRequestID.String(string(requestID)))
	}
}

// Routed records the routing decision.
func (r *Request) Routed(d *Routing) {
	if r.on {
		r.routed(d)
	}
}

func (r *Request) routed(d *Routing) {
	if !r.span.IsRecording() {
		return
	}
	r.span.SetAttributes(
		AttrRoute.String(d.Route),
		AttrModel.String(string(d.Model)),
		AttrPhase.String(d.Phase),
		AttrBackend.String(d.Backend),
		AttrCached.Int(d.Cached),
		AttrNovel.Int(d.Novel),
		AttrQueueWait.Float64(float64(d.QueueWait)/1e6),
	)
	if d.Tenant != "" {
		r.span.SetAttributes(AttrTenant.String(d.Tenant))
	}
}

// AttemptBegin starts the span of an upstream attempt on backend.
func (r *Request) AttemptBegin(backend string) {
	if r.on {
		r.attemptBegin(backend)
	}
}

func (r *Request) attemptBegin(backend string) {
	if r.inAtt {
		r.AttemptEnd(0, errors.New("attempt abandoned"))
	}
	r.attempts++
	r.inAtt = true
	_, r.attempt = r.t.tr.Start(r.ctx, "upstream", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(AttrServer.String(backend), AttrAttempt.Int(r.attempts)))
	sc := r.attempt.SpanContext()
	formatTraceparent(&r.hdr, sc.TraceID(), sc.SpanID(), byte(sc.TraceFlags()))
}

// AppendHeaders appends "traceparent: ...\r\n" (and tracestate) for the
// attempt in progress, so the backend's spans are its children. Off, or
// before AttemptBegin, it appends nothing.
func (r *Request) AppendHeaders(b []byte) []byte {
	if !r.on || !r.inAtt {
		return b
	}
	return r.appendHeaders(b)
}

func (r *Request) appendHeaders(b []byte) []byte {
	b = append(b, "traceparent: "...)
	b = append(b, r.hdr[:]...)
	b = append(b, "\r\n"...)
	if len(r.state) > 0 {
		b = append(b, "tracestate: "...)
		b = append(b, r.state...)
		b = append(b, "\r\n"...)
	}
	return b
}

// Traceparent returns the traceparent value AppendHeaders sends, or nil;
// it aliases r.
func (r *Request) Traceparent() []byte {
	if !r.on || !r.inAtt {
		return nil
	}
	return r.hdr[:]
}

// AttemptEnd ends the attempt's span: the backend's status (0 when none
// came) and the error that ended the attempt, if any.
func (r *Request) AttemptEnd(status int, err error) {
	if r.on && r.inAtt {
		r.attemptEnd(status, err)
	}
}

func (r *Request) attemptEnd(status int, err error) {
	r.inAtt = false
	if r.attempt.IsRecording() {
		if status > 0 {
			r.attempt.SetAttributes(AttrStatus.Int(status))
		}
		if err != nil {
			r.attempt.RecordError(err)
			r.attempt.SetStatus(codes.Error, err.Error())
		} else if status >= 500 {
			r.attempt.SetStatus(codes.Error, "")
		}
	}
	r.attempt.End()
}

// End ends the request's span with the status the client got.
func (r *Request) End(status int) {
	if r.on {
		r.end(status)
	}
}

func (r *Request) end(status int) {
	if r.inAtt {
		r.AttemptEnd(0, errors.New("request ended during the attempt"))
	}
	if r.span.IsRecording() {
		r.span.SetAttributes(AttrStatus.Int(status), AttrAttempts.Int(r.attempts))
		if status >= 500 {
			r.span.SetStatus(codes.Error, "")
		}
	}
	r.span.End()
	r.on, r.t, r.ctx, r.span, r.attempt = false, nil, nil, nil, nil
}
