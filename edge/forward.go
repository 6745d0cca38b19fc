package edge

import (
	"strconv"

	"github.com/kvca/kvca/apikeys"
	"github.com/kvca/kvca/h1"
	"github.com/kvca/kvca/tracing"
)

// The forwarding rules, the same for every request kvca relays:
//
//   - Host is the backend's authority, or the client's with --preserve-host
//     (an absolute-form target's authority is never used);
//   - the backend URL's path prefix goes before the request's path;
//   - hop-by-hop fields, and every field the Connection header names, are
//     removed, both ways (RFC 9110 §7.6.1);
//   - the body goes with a Content-Length kvca writes itself (a chunked
//     upload has been decoded), never the client's framing fields; Expect
//     was answered by kvca;
//   - the body goes as the client sent it, but for a plain stream's edit
//     that asks for its usage (--stream-usage, call.ask), which the
//     transport sends after the head;
//   - X-Forwarded-For holds every client X-Forwarded-For value in order,
//     then the peer's address; X-Forwarded-Proto likewise, then the
//     scheme the client used;
//   - X-Request-Id is the request's id (the client's if valid).

// fwd is what else shapes an upstream head besides the request.
type fwd struct {
	tls          bool // the client came over TLS
	preserveHost bool
	// dropCreds keeps client credentials (Authorization, x-api-key,
	// api-key) at the edge: with API keys they are tenants' keys, and
	// with a backend key kvca authenticates itself.
	dropCreds  bool
	backendKey string
	tr         *tracing.Request // its traceparent replaces the client's
}

// appendUpstreamHead appends the request head kvca sends to u for the
// request h parsed from b, whose body has bodyLen bytes.
func appendUpstreamHead(o, b []byte, h *h1.Request, u *upstream, bodyLen int, peer, rid []byte, f *fwd) []byte {
	o = append(o, h.Method.Of(b)...)
	o = append(o, ' ')
	o = append(o, u.addr.prefix...)
	if uri := h.URI.Of(b); len(uri) == 0 || uri[0] != '/' {
		o = append(o, '/')
		o = append(o, uri...)
	} else {
		o = append(o, uri...)
	}
	o = append(o, " HTTP/1.1\r\nHost: "...)
	if f.preserveHost && h.Host.Len() > 0 {
		o = append(o, h.Host.Of(b)...)
	} else {
		o = append(o, u.authority...)
	}
	o = append(o, "\r\n"...)
	xff, xfp := 0, 0
	for i := 0; i < h.NF; i++ {
		name := h.Names[i].Of(b)
		if dropRequestField(name) || (h.NN > 0 && h.IsNominated(b, name)) ||
			(f.dropCreds && apikeys.IsCredentialHeader(name)) || (f.tr.Active() && isTraceHeader(name)) {
			switch len(name) {
			case 15:
				if h1.EqualFold(name, "x-forwarded-for") {
					xff++
				}
			case 17:
				if h1.EqualFold(name, "x-forwarded-proto") {
					xfp++
				}
			}
			continue
		}
		o = append(o, name...)
		o = append(o, ": "...)
		o = append(o, h.Vals[i].Of(b)...)
		o = append(o, "\r\n"...)
	}
	if bodyLen > 0 || h.ContentLength >= 0 || h.Chunked {
		o = append(o, "Content-Length: "...)
		o = strconv.AppendInt(o, int64(bodyLen), 10)
		o = append(o, "\r\n"...)
	}
	o = append(o, "X-Forwarded-For: "...)
	o = appendMerged(o, b, h, "x-forwarded-for", xff)
	o = append(o, peer...)
	o = append(o, "\r\nX-Forwarded-Proto: "...)
	o = appendMerged(o, b, h, "x-forwarded-proto", xfp)
	if f.tls {
		o = append(o, "https"...)
	} else {
		o = append(o, "http"...)
	}
	o = append(o, "\r\nX-Request-Id: "...)
	o = append(o, rid...)
	o = append(o, "\r\n"...)
	o = f.tr.AppendHeaders(o)
	o = apikeys.AppendBackendAuth(o, f.backendKey)
	return append(o, "\r\n"...)
}

// isTraceHeader: W3C trace context, which kvca's own span continues.
func isTraceHeader(name []byte) bool {
	return len(name) == 11 && h1.EqualFold(name, "traceparent") || len(name) == 10 && h1.EqualFold(name, "tracestate")
}

// appendMerged appends every value of the field name (lower case), each
// followed by ", ", in the order the client sent them.
func appendMerged(o, b []byte, h *h1.Request, name string, n int) []byte {
	for i := 0; i < h.NF && n > 0; i++ {
		if f := h.Names[i].Of(b); len(f) == len(name) && h1.EqualFold(f, name) {
			n--
			if v := h.Vals[i].Of(b); len(v) > 0 {
				o = append(o, v...)
				o = append(o, ", "...)
			}
		}
	}
	return o
}

// dropRequestField reports whether a client field never goes upstream as
// sent: hop-by-hop, framing, or a field kvca writes itself.
func dropRequestField(name []byte) bool {
	switch len(name) {
	case 4:
		return h1.EqualFold(name, "host")
	case 6:
		return h1.EqualFold(name, "expect")
	case 12:
		return h1.EqualFold(name, "x-request-id")
	case 13:
		return h1.EqualFold(name, "x-kvca-tenant") // kvca's own, for admission
	case 14:
		return h1.EqualFold(name, "content-length")
	case 15:
		return h1.EqualFold(name, "x-forwarded-for") || h1.EqualFold(name, "x-kvca-priority")
	case 17:
		return h1.EqualFold(name, "transfer-encoding") || h1.EqualFold(name, "x-forwarded-proto")
	}
	return h1.IsHop(name)
}

// appendClientHead appends the response head kvca sends the client for
// the upstream head r parsed from b, relayed with framing mode (dechunk:
// a chunked body relayed as its data, for an HTTP/1.0 client).
func appendClientHead(o, b []byte, r *h1.Response, mode int, dechunk bool, rid, extra []byte, close bool) []byte {
	o = append(o, "HTTP/1.1 "...)
	o = strconv.AppendInt(o, int64(r.Status), 10)
	o = append(o, ' ')
	if r.Reason.Len() > 0 {
		o = append(o, r.Reason.Of(b)...)
	} else {
		o = append(o, statusText(r.Status)...)
	}
	o = append(o, "\r\n"...)
	for i := 0; i < r.NF; i++ {
		name := r.Names[i].Of(b)
		if h1.IsHop(name) || (r.NN > 0 && r.IsNominated(b, name)) {
			continue
		}
		switch len(name) {
		case 14:
			if mode == h1.BodyChunked && h1.EqualFold(name, "content-length") {
				continue
			}
		case 17:
			if h1.EqualFold(name, "transfer-encoding") && (mode != h1.BodyChunked || dechunk) {
				continue
			}
		}
		o = append(o, name...)
		o = append(o, ": "...)
		o = append(o, r.Vals[i].Of(b)...)
		o = append(o, "\r\n"...)
	}
	if !r.RequestID {
		o = append(o, "X-Request-Id: "...)
		o = append(o, rid...)
		o = append(o, "\r\n"...)
	}
	o = append(o, extra...)
	if close {
		o = append(o, "Connection: close\r\n"...)
	}
	return append(o, "\r\n"...)
}
