package edge

import (
	"bytes"
	"errors"

	"github.com/valyala/fasthttp"
)

// This file holds the HTTP/1.1 framing the event-loop edge (--io epoll)
// needs: parsing a request head and a response head out of a read buffer,
// following a chunked body as it passes through, and writing kvca's own
// error answers. The parsers are deliberately narrow: they accept the
// requests the loop serves itself (POST, HTTP/1.1, Content-Length) and
// report anything else as "not mine", so the connection goes to fasthttp,
// whose full parser answers or refuses it. They never have to be lenient.

// maxHeaders bounds the header lines a head may carry on the fast path.
const maxHeaders = 64

// span is a byte range of the buffer a head was parsed from.
type span struct{ off, end int32 }

func (s span) of(b []byte) []byte { return b[s.off:s.end] }

// reqHead is a parsed request head; spans index the parse buffer.
type reqHead struct {
	size        int // bytes of the head, final CRLF included
	method      span
	uri         span
	path        span // uri without its query
	minor       byte // HTTP/1.<minor>
	contentLen  int64
	hasLen      bool
	hasTE       bool // any Transfer-Encoding
	expect      bool // Expect: (100-continue or anything else)
	upgrade     bool
	close       bool // Connection: close
	xffN        int  // X-Forwarded-For lines (earlier hops to extend)
	rid         span // X-Request-Id value, if any
	nh          int
	names, vals [maxHeaders]span
}

// Results of parsing a head.
const (
	headMore  = iota // incomplete: read more
	headOK           // complete and parsed
	headOther        // complete or not, not for the fast path: hand it over
)

// parseRequestHead parses the request head at the start of b.
func parseRequestHead(b []byte, h *reqHead) int {
	end := bytes.Index(b, crlfcrlf)
	if end < 0 {
		if bytes.IndexByte(b, '\n') >= 0 && bytes.IndexByte(b, '\r') < 0 {
			return headOther // bare-LF lines: fasthttp copes or refuses
		}
		return headMore
	}
	*h = reqHead{size: end + 4, contentLen: -1}
	line, rest := cutLine(b[:end+2], 0)
	// Request line: METHOD SP request-target SP HTTP/1.x
	sp1 := bytes.IndexByte(b[line.off:line.end], ' ')
	if sp1 <= 0 {
		return headOther
	}
	h.method = span{line.off, line.off + int32(sp1)}
	uriStart := h.method.end + 1
	sp2 := bytes.IndexByte(b[uriStart:line.end], ' ')
	if sp2 <= 0 {
		return headOther
	}
	h.uri = span{uriStart, uriStart + int32(sp2)}
	proto := b[h.uri.end+1 : line.end]
	if len(proto) != 8 || string(proto[:7]) != "HTTP/1." || proto[7] < '0' || proto[7] > '9' {
		return headOther
	}
	h.minor = proto[7] - '0'
	uri := h.uri.of(b)
	if uri[0] != '/' {
		return headOther // absolute-form or asterisk-form
	}
	h.path = h.uri
	if q := bytes.IndexByte(uri, '?'); q >= 0 {
		h.path.end = h.path.off + int32(q)
	}
	for rest < int32(end+2) {
		line, rest = cutLine(b[:end+2], rest)
		ns, v, ok := headerLine(b, line)
		if !ok || h.nh == maxHeaders || !validName(ns.of(b)) {
			return headOther // obs-fold, no name, or too many headers
		}
		h.names[h.nh], h.vals[h.nh] = ns, v
		h.nh++
		name, val := ns.of(b), v.of(b)
		switch len(name) {
		case 6:
			h.expect = h.expect || equalFoldASCII("Expect", name)
		case 7:
			h.upgrade = h.upgrade || equalFoldASCII("Upgrade", name)
		case 10:
			if equalFoldASCII("Connection", name) {
				if hasToken(val, "close") {
					h.close = true
				}
				if hasToken(val, "upgrade") {
					h.upgrade = true
				}
			}
		case 12:
			if equalFoldASCII("X-Request-Id", name) {
				h.rid = v
			}
		case 14:
			if equalFoldASCII("Content-Length", name) {
				n, ok := parseLength(val)
				if !ok || h.hasLen {
					return headOther // bad or repeated: fasthttp refuses it
				}
				h.contentLen, h.hasLen = n, true
			}
		case 15:
			if equalFoldASCII("X-Forwarded-For", name) {
				h.xffN++
			}
		case 17:
			h.hasTE = h.hasTE || equalFoldASCII("Transfer-Encoding", name)
		}
	}
	return headOK
}

var crlfcrlf = []byte("\r\n\r\n")

// headerLine splits a header line into its name and its value without
// surrounding blanks; false for a line without a name (or a folded one).
func headerLine(b []byte, line span) (name, val span, ok bool) {
	l := line.of(b)
	colon := bytes.IndexByte(l, ':')
	if colon <= 0 || l[0] == ' ' || l[0] == '\t' {
		return span{}, span{}, false
	}
	val = span{line.off + int32(colon) + 1, line.end}
	for val.off < val.end && (b[val.off] == ' ' || b[val.off] == '\t') {
		val.off++
	}
	for val.end > val.off && (b[val.end-1] == ' ' || b[val.end-1] == '\t') {
		val.end--
	}
	return span{line.off, line.off + int32(colon)}, val, true
}

// cutLine returns the line of b starting at off without its CRLF, and the
// offset of the next line.
func cutLine(b []byte, off int32) (span, int32) {
	i := bytes.IndexByte(b[off:], '\n')
	if i < 0 {
		return span{off, int32(len(b))}, int32(len(b))
	}
	e := off + int32(i)
	next := e + 1
	if e > off && b[e-1] == '\r' {
		e--
	}
	return span{off, e}, next
}

// validName reports whether name is an RFC 9110 token.
func validName(name []byte) bool {
	for _, c := range name {
		if c <= ' ' || c >= 0x7f || bytes.IndexByte([]byte(`"(),/:;<=>?@[\]{}`), c) >= 0 {
			return false
		}
	}
	return true
}

// parseLength parses a Content-Length value: digits only, no sign, at
// most 15 of them.
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// hasToken reports whether the comma-separated list v holds tok (any case).
func hasToken(v []byte, tok string) bool {
	for len(v) > 0 {
		var t []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			t, v = v[:i], v[i+1:]
		} else {
			t, v = v, nil
		}
		t = bytes.TrimSpace(t)
		if len(t) == len(tok) && equalFoldASCII(tok, t) {
			return true
		}
	}
	return false
}

// respHead is a parsed upstream response head.
type respHead struct {
	size       int
	status     int
	minor      byte
	contentLen int64 // -1: none
	chunked    bool  // Transfer-Encoding ending in chunked
	otherTE    bool  // a Transfer-Encoding that does not end in chunked
	close      bool  // Connection: close (or HTTP/1.0 without keep-alive)
	keepAlive  bool  // Connection: keep-alive (matters for HTTP/1.0)
	sse        bool  // Content-Type: text/event-stream
	hasRID     bool
	nh         int
	names      [maxHeaders]span
	vals       [maxHeaders]span
	statusLine span
}

// errBadResponse is an upstream answer kvca cannot frame.
var errBadResponse = errors.New("malformed response head from upstream")

// parseResponseHead parses the response head at the start of b: headMore,
// headOK, or headOther for a head kvca refuses (answered 502).
func parseResponseHead(b []byte, h *respHead) int {
	end := bytes.Index(b, crlfcrlf)
	if end < 0 {
		return headMore
	}
	*h = respHead{size: end + 4, contentLen: -1}
	line, rest := cutLine(b[:end+2], 0)
	l := line.of(b)
	// HTTP/1.x SP 3DIGIT [SP reason]
	if len(l) < 12 || string(l[:7]) != "HTTP/1." || l[8] != ' ' || (len(l) > 12 && l[12] != ' ') {
		return headOther
	}
	h.minor = l[7] - '0'
	for _, c := range l[9:12] {
		if c < '0' || c > '9' {
			return headOther
		}
		h.status = h.status*10 + int(c-'0')
	}
	h.statusLine = line
	for rest < int32(end+2) {
		line, rest = cutLine(b[:end+2], rest)
		ns, v, ok := headerLine(b, line)
		if !ok || h.nh == maxHeaders {
			return headOther
		}
		h.names[h.nh], h.vals[h.nh] = ns, v
		h.nh++
		name, val := ns.of(b), v.of(b)
		switch len(name) {
		case 10:
			if equalFoldASCII("Connection", name) {
				h.close = h.close || hasToken(val, "close")
				h.keepAlive = h.keepAlive || hasToken(val, "keep-alive")
			}
		case 12:
			if equalFoldASCII("Content-Type", name) {
				h.sse = len(val) >= 17 && equalFoldASCII("text/event-stream", val[:17])
			} else if equalFoldASCII("X-Request-Id", name) {
				h.hasRID = true
			}
		case 14:
			if equalFoldASCII("Content-Length", name) {
				n, ok := parseLength(val)
				if !ok || (h.contentLen >= 0 && n != h.contentLen) {
					return headOther
				}
				h.contentLen = n
			}
		case 17:
			if equalFoldASCII("Transfer-Encoding", name) {
				v := bytes.TrimSpace(val)
				if i := bytes.LastIndexByte(v, ','); i >= 0 {
					v = bytes.TrimSpace(v[i+1:])
				}
				if len(v) == 7 && equalFoldASCII("chunked", v) {
					h.chunked = true
				} else {
					h.otherTE = true
				}
			}
		}
	}
	if h.otherTE {
		return headOther // a coding kvca cannot frame for the client
	}
	if h.minor == 0 && !h.keepAlive {
		h.close = true
	}
	return headOK
}

// Framing of a response body, decided from its head (RFC 9112 §6.3).
func (h *respHead) framing(headReq bool) int {
	switch {
	case headReq || h.status < 200 || h.status == 204 || h.status == 304:
		return bodyNone
	case h.chunked:
		return bodyChunked
	case h.otherTE || h.contentLen < 0:
		return bodyUntilClose
	case h.contentLen == 0:
		return bodyNone
	}
	return bodyFixed
}

// chunkScan follows a chunked body as its bytes pass through unchanged,
// to find where it ends and whether a cut would fall between chunks.
type chunkScan struct {
	state int
	size  int64 // data bytes left in the current chunk
	ndig  int   // hex digits seen in the size line
}

const (
	csSize      = iota // in a chunk-size line, before any extension
	csExt              // in a chunk-size line's extension
	csSizeLF           // saw CR ending the size line
	csData             // in chunk data
	csDataCR           // expecting CR after data
	csDataLF           // expecting LF after data
	csTrailer          // at the start of a trailer line (or the final CRLF)
	csTrailerL         // inside a trailer line
	csTrailerLF        // saw CR of a trailer line
	csEndLF            // saw CR of the final empty line
	csDone
)

// scan consumes p. It returns how many bytes belong to the body (all of p,
// or up to the end of the body) and whether the body ended; err is set
// for a malformed body.
func (s *chunkScan) scan(p []byte) (n int, done bool, err error) {
	for n < len(p) {
		c := p[n]
		switch s.state {
		case csSize:
			switch {
			case c == '\r':
				if s.ndig == 0 {
					return n, false, errBadChunk
				}
				s.state = csSizeLF
			case c == ';' || c == ' ' || c == '\t':
				if s.ndig == 0 {
					return n, false, errBadChunk
				}
				s.state = csExt
			default:
				d, ok := unhex(c)
				if !ok || s.ndig == 15 {
					return n, false, errBadChunk
				}
				s.size = s.size<<4 | int64(d)
				s.ndig++
			}
		case csExt:
			if c == '\r' {
				s.state = csSizeLF
			} else if c == '\n' {
				return n, false, errBadChunk
			}
		case csSizeLF:
			if c != '\n' {
				return n, false, errBadChunk
			}
			s.ndig = 0
			if s.size == 0 {
				s.state = csTrailer
			} else {
				s.state = csData
			}
		case csData:
			k := int64(len(p) - n)
			if k > s.size {
				k = s.size
			}
			s.size -= k
			n += int(k)
			if s.size == 0 {
				s.state = csDataCR
			}
			continue
		case csDataCR:
			if !s.expect(c, '\r', csDataLF) {
				return n, false, errBadChunk
			}
		case csDataLF:
			if !s.expect(c, '\n', csSize) {
				return n, false, errBadChunk
			}
		case csTrailer:
			if c == '\r' {
				s.state = csEndLF
			} else {
				s.state = csTrailerL
			}
		case csTrailerL:
			if c == '\r' {
				s.state = csTrailerLF
			}
		case csTrailerLF:
			if !s.expect(c, '\n', csTrailer) {
				return n, false, errBadChunk
			}
		case csEndLF:
			if !s.expect(c, '\n', csDone) {
				return n, false, errBadChunk
			}
			return n + 1, true, nil
		case csDone:
			return n, true, nil
		}
		n++
	}
	return n, s.state == csDone, nil
}

// expect moves to next if c is want.
func (s *chunkScan) expect(c, want byte, next int) bool {
	if c != want {
		return false
	}
	s.state = next
	return true
}

// between reports whether the bytes scanned so far end on a chunk
// boundary, where an SSE error event can still be sent as a chunk.
func (s *chunkScan) between() bool { return s.state == csSize && s.ndig == 0 }

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// appendErrorBody appends kvca's error body in OpenAI's shape.
func appendErrorBody(b []byte, typ, code, msg string) []byte {
	b = append(b, `{"error":{"message":`...)
	b = appendJSONString(b, msg)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"param":null,"code":`...)
	b = appendJSONString(b, code)
	return append(b, "}}\n"...)
}

// appendErrorResponse appends a whole HTTP/1.1 error answer.
func appendErrorResponse(b []byte, status int, typ, code, msg, rid string, close bool) []byte {
	body := appendErrorBody(nil, typ, code, msg)
	b = append(b, "HTTP/1.1 "...)
	b = fasthttp.AppendUint(b, status)
	b = append(b, ' ')
	b = append(b, fasthttp.StatusMessage(status)...)
	b = append(b, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = fasthttp.AppendUint(b, len(body))
	if rid != "" {
		b = append(b, "\r\nX-Request-Id: "...)
		b = append(b, rid...)
	}
	if close {
		b = append(b, "\r\nConnection: close"...)
	}
	b = append(b, "\r\n\r\n"...)
	return append(b, body...)
}

// sseBrokenChunk is sseBrokenEvent as one chunk of a chunked body.
var sseBrokenChunk = func() []byte {
	b := fasthttp.AppendUint(nil, 0)[:0]
	b = append(b, []byte(hexLen(len(sseBrokenEvent)))...)
	b = append(b, "\r\n"...)
	b = append(b, sseBrokenEvent...)
	return append(b, "\r\n"...)
}()

func hexLen(n int) string {
	const digits = "0123456789abcdef"
	if n == 0 {
		return "0"
	}
	var buf [16]byte
	i := len(buf)
	for n > 0 {
		i--
		buf[i] = digits[n&0xf]
		n >>= 4
	}
	return string(buf[i:])
}
