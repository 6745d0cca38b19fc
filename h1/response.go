package h1

import "bytes"

// MaxResponseHead bounds an upstream response head.
const MaxResponseHead = 64 << 10

// Body framings of a response (RFC 9112 §6.3).
const (
	BodyNone       = iota
	BodyFixed      // Content-Length
	BodyChunked    // Transfer-Encoding: chunked (SSE from vLLM and SGLang)
	BodyUntilClose // neither: the body ends when the backend closes
)

// Response is a parsed upstream response head. Spans index the buffer.
type Response struct {
	Size   int
	Status int
	Minor  byte
	// Reason is the status line's reason phrase (may be empty).
	Reason Span
	// ContentLength is -1 without a Content-Length field.
	ContentLength int64
	Chunked       bool
	// Close: the backend ends the connection after this answer.
	Close     bool
	SSE       bool // Content-Type: text/event-stream
	RequestID bool // the backend set X-Request-Id
	NF        int
	Names     [MaxFields]Span
	Vals      [MaxFields]Span
	Nominated [MaxNominated]Span
	NN        int
}

// ErrResponse is an upstream answer kvca cannot frame or will not relay.
var ErrResponse = &Error{Status: 502, Code: "upstream_error", Msg: "malformed response head from upstream"}

// ParseResponse parses the response head at the start of b: More, OK, or
// Bad (ErrResponse). The backend is less hostile than the internet but
// not trusted either: bytes that would be invalid in a client's head are
// refused here too, so nothing a backend sends can split the client's
// answer.
func ParseResponse(b []byte, r *Response) (int, *Error) {
	end := bytes.Index(b, crlfcrlf)
	if end < 0 {
		if len(b) > MaxResponseHead {
			return Bad, ErrResponse
		}
		return More, nil
	}
	if end+4 > MaxResponseHead {
		return Bad, ErrResponse
	}
	// Field by field: the whole struct is 1.7 KB of spans, which only
	// NF and NN say are in use.
	r.Size, r.Status, r.Minor, r.Reason = end+4, 0, 0, Span{}
	r.ContentLength, r.Chunked, r.Close, r.SSE, r.RequestID = -1, false, false, false, false
	r.NF, r.NN = 0, 0
	head := b[:end+2]
	off := 0
	nl := bytes.IndexByte(head, '\n')
	if nl <= 0 || head[nl-1] != '\r' {
		return Bad, ErrResponse
	}
	l := head[:nl-1]
	// HTTP/1.x SP 3DIGIT [SP reason-phrase]
	if len(l) < 12 || string(l[:7]) != "HTTP/1." || (l[7] != '0' && l[7] != '1') || l[8] != ' ' ||
		(len(l) > 12 && l[12] != ' ') || !isDigit(l[9]) || !isDigit(l[10]) || !isDigit(l[11]) || l[9] == '0' {
		return Bad, ErrResponse
	}
	r.Minor = l[7] - '0'
	r.Status = int(l[9]-'0')*100 + int(l[10]-'0')*10 + int(l[11]-'0')
	if len(l) > 13 {
		if !validValue(l[13:]) {
			return Bad, ErrResponse
		}
		r.Reason = Span{13, int32(len(l))}
	}
	keepAlive := false
	te := false
	for off = nl + 1; off < len(head); {
		nl := bytes.IndexByte(head[off:], '\n')
		if nl <= 0 || head[off+nl-1] != '\r' {
			return Bad, ErrResponse
		}
		line := head[off : off+nl-1]
		lo := int32(off)
		off += nl + 1
		if line[0] == ' ' || line[0] == '\t' {
			return Bad, ErrResponse
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) || r.NF == MaxFields {
			return Bad, ErrResponse
		}
		v := line[colon+1:]
		vs, ve := 0, len(v)
		for vs < ve && (v[vs] == ' ' || v[vs] == '\t') {
			vs++
		}
		for ve > vs && (v[ve-1] == ' ' || v[ve-1] == '\t') {
			ve--
		}
		v = v[vs:ve]
		if !validValue(v) {
			return Bad, ErrResponse
		}
		name := Span{lo, lo + int32(colon)}
		r.Names[r.NF] = name
		r.Vals[r.NF] = Span{lo + int32(colon+1+vs), lo + int32(colon+1+ve)}
		r.NF++
		n := name.Of(b)
		switch len(n) {
		case 10:
			if equalFold(n, "connection") {
				for t := v; len(t) > 0; {
					var tok []byte
					tok, t = nextToken(t)
					switch {
					case len(tok) == 0:
					case equalFold(tok, "close"):
						r.Close = true
					case equalFold(tok, "keep-alive"):
						keepAlive = true
					}
					if len(tok) > 0 && r.NN < MaxNominated {
						s := int32(cap(line) - cap(tok)) // tok is a piece of line
						r.Nominated[r.NN] = Span{lo + s, lo + s + int32(len(tok))}
						r.NN++
					}
				}
			}
		case 12:
			if equalFold(n, "content-type") {
				r.SSE = len(v) >= 17 && equalFold(v[:17], "text/event-stream")
			} else if equalFold(n, "x-request-id") {
				r.RequestID = true
			}
		case 14:
			if equalFold(n, "content-length") {
				l, ok := ParseLength(v)
				if !ok || (r.ContentLength >= 0 && l != r.ContentLength) {
					return Bad, ErrResponse
				}
				r.ContentLength = l
			}
		case 17:
			if equalFold(n, "transfer-encoding") {
				te = true
				last := v
				if i := bytes.LastIndexByte(v, ','); i >= 0 {
					last = bytes.TrimSpace(v[i+1:])
				}
				r.Chunked = equalFold(last, "chunked")
				if !r.Chunked {
					return Bad, ErrResponse // a coding kvca cannot frame for the client
				}
			}
		}
	}
	if te && r.ContentLength >= 0 {
		// RFC 9112 §6.3: Transfer-Encoding overrides; such a message may
		// be a smuggling attempt, so the connection is not reused.
		r.ContentLength = -1
		r.Close = true
	}
	if r.Minor == 0 && !keepAlive {
		r.Close = true
	}
	return OK, nil
}

var crlfcrlf = []byte("\r\n\r\n")

// Framing decides how the body of r ends; head is true for the answer
// to a HEAD request.
func (r *Response) Framing(head bool) int {
	switch {
	case head || r.Status < 200 || r.Status == 204 || r.Status == 304:
		return BodyNone
	case r.Chunked:
		return BodyChunked
	case r.ContentLength < 0:
		return BodyUntilClose
	case r.ContentLength == 0:
		return BodyNone
	}
	return BodyFixed
}

// IsNominated reports whether the response's Connection header lists name.
func (r *Response) IsNominated(b, name []byte) bool {
	for i := 0; i < r.NN; i++ {
		if n := r.Nominated[i].Of(b); len(n) == len(name) && equalFoldBytes(n, name) {
			return true
		}
	}
	return false
}

// hopHeaders are connection-scoped and never cross the proxy (RFC 9110
// §7.6.1), in lower case. Content-Length and Transfer-Encoding are not
// among them: the edge writes the framing it relays itself.
var hopHeaders = [...]string{
	"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
	"proxy-authorization", "te", "trailer", "upgrade",
}

// IsHop reports whether name is a hop-by-hop field name (any case).
func IsHop(name []byte) bool {
	switch len(name) {
	case 2, 7, 10, 16, 18, 19:
	default:
		return false
	}
	for _, h := range hopHeaders {
		if equalFold(name, h) {
			return true
		}
	}
	return false
}
