// Package epp is kvca as the endpoint picker of an inference gateway: an
// Envoy external processor (ext_proc) that reads each request and names
// the model server that should serve it, as the Gateway API Inference
// Extension's endpoint picker protocol has it (docs/endpoint-picker.md).
//
// The picker moves no bytes of its own to the model servers: Envoy does.
// It is one more transport of kvca's request lifecycle: every decision
// (planning, sessions, admission, routing, learning, release, metrics,
// the access log) is the lifecycle's, reached through Proxy.
package epp

import "context"

// Headers is a read-only view of a header map: HTTP/2 pseudo-headers
// (":method", ":path", ":authority") included, names in lower case.
type Headers interface {
	Len() int
	At(i int) (name, value []byte)
}

// Proxy is what the picker needs of the proxy: a request lifecycle per
// ext_proc stream, and the endpoints it may name.
type Proxy interface {
	// Begin starts the lifecycle of one request from its headers.
	Begin(h Headers) Exchange
	// Endpoints are the endpoints ("ip:port") the lifecycle routes over
	// now, in no particular order.
	Endpoints() []string
	// SetEndpoints replaces the endpoints ("ip:port", model servers
	// speaking plain HTTP) by those an InferencePool's pods give.
	SetEndpoints(eps []string) error
	// Ready reports whether the picker can pick (some endpoint healthy).
	Ready() bool
}

// RequestHeaderer is an Exchange that sets request headers with its pick
// (the prefill worker of a disaggregated request, PrefillerHeader).
// RequestHeaders is called once Pick has picked.
type RequestHeaderer interface {
	RequestHeaders() [][2]string
}

// PickNower is an Exchange that can tell that its pick would wait for
// admission instead of waiting: the picker then waits on a goroutine of
// the stream's own, and the connection's other streams go on meanwhile.
// Pick, called after PickNow said wait, goes on from where it stopped.
// An Exchange without it always picks on a goroutine of its own.
type PickNower interface {
	PickNow(subset []string) (endpoints []string, ans *Answer, wait bool)
}

// Answer is an answer the lifecycle gives itself, without a model
// server: an error (400, 401, 404, 413, 429 when admission or a quota
// sheds, 503 when no endpoint is ready) or one of kvca's own routes.
type Answer struct {
	Status int
	// Header is extra response headers, name then value.
	Header [][2]string
	Body   []byte
}

// Exchange is one request's lifecycle as the picker drives it, in this
// order: Body until end, Pick, then for a picked request Response,
// ResponseBody until end; End always, exactly once, whatever happened
// before (a stream Envoy cancels ends with End(true)). Methods are
// called from one goroutine at a time.
type Exchange interface {
	// Body takes the next chunk of the request body (borrowed: copied
	// if kept, but a whole body, its first chunk marked end, may be kept
	// as it is until End: the caller leaves it unchanged); end marks the
	// last. An answer ends the request early (413 for a body over the
	// limit).
	Body(chunk []byte, end bool) *Answer
	// Pick plans, admits and routes the request. subset, when not nil,
	// is the endpoints the gateway allows (the subset hint). It returns
	// the chosen endpoint and the fallbacks, in order, for the gateway's
	// retries; or an answer the gateway gives the client itself. It may
	// wait in the admission queue until ctx ends.
	Pick(ctx context.Context, subset []string) (endpoints []string, ans *Answer)
	// Response takes the model server's response head, from served (the
	// endpoint that answered, as the gateway reports it; "" when it does
	// not: the first pick). It returns headers to add to the response.
	Response(status int, served string, h Headers) (add [][2]string)
	// ResponseBody takes the next chunk of the answer's body (borrowed);
	// end marks the last.
	ResponseBody(chunk []byte, end bool)
	// End ends the lifecycle and releases what it holds, exactly once;
	// cancelled: the stream ended before the answer did.
	End(cancelled bool)
}
