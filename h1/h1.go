// Package h1 is kvca's HTTP/1.1 framing and acceptance policy (RFC 9110,
// RFC 9112): it parses a request head out of a read buffer and decides
// whether kvca accepts it, parses an upstream response head, and follows
// or decodes chunked bodies. It is the one place that decides what is
// valid HTTP at the edge; it does no I/O and allocates nothing.
//
// The policy is strict: what the RFCs call invalid is refused with a
// status and a reason, never repaired. Bare CR or LF line ends, obs-fold,
// control bytes in the request target or a field value, field names that
// are not tokens, a missing or repeated Host, conflicting or repeated
// framing headers, versions other than HTTP/1.0 and HTTP/1.1, and heads
// over MaxHeadBytes or MaxFields are all refused.
package h1

import (
	"bytes"
	"encoding/binary"
)

// Span is a byte range of the buffer a head was parsed from.
type Span struct{ Off, End int32 }

// Of returns the bytes of s in b.
func (s Span) Of(b []byte) []byte { return b[s.Off:s.End] }

// Len is the span's length.
func (s Span) Len() int { return int(s.End - s.Off) }

// Limits of a request head.
const (
	MaxHeadBytes = 16 << 10 // request line, fields and the blank line
	MaxFields    = 100
	// MaxNominated bounds the field names a Connection header may list.
	MaxNominated = 16
)

// Results of parsing a head.
const (
	More = iota // incomplete: read more, then call again
	OK          // complete and accepted
	Bad         // refused: see the *Error
)

// Error is a refusal: the status to answer and why. The connection is
// always closed after answering one.
type Error struct {
	Status int
	Code   string // the error code in kvca's answer
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

func bad(msg string) *Error { return &Error{Status: 400, Code: "bad_http", Msg: msg} }

// The refusals. They are values, compared by identity in tests.
var (
	ErrBareCR         = bad("malformed HTTP request: bare CR")
	ErrBareLF         = bad("malformed HTTP request: line not ended by CRLF")
	ErrRequestLine    = bad("malformed HTTP request: invalid request line")
	ErrTarget         = bad("malformed HTTP request: invalid request target")
	ErrFieldName      = bad("malformed HTTP request: invalid header field name")
	ErrFieldValue     = bad("malformed HTTP request: invalid header field value")
	ErrObsFold        = bad("malformed HTTP request: obsolete line folding")
	ErrNoHost         = bad("malformed HTTP request: missing Host header")
	ErrTwoHosts       = bad("malformed HTTP request: more than one Host header")
	ErrHost           = bad("malformed HTTP request: invalid Host header")
	ErrLength         = bad("malformed HTTP request: invalid Content-Length")
	ErrTwoLengths     = bad("malformed HTTP request: more than one Content-Length")
	ErrLengthAndTE    = bad("malformed HTTP request: both Content-Length and Transfer-Encoding")
	ErrTEVersion      = bad("malformed HTTP request: Transfer-Encoding in an HTTP/1.0 request")
	ErrChunkedNotLast = bad("malformed HTTP request: chunked is not the final transfer coding")
	ErrConnection     = bad("malformed HTTP request: invalid Connection header")
	ErrTooLarge       = &Error{Status: 431, Code: "request_header_fields_too_large", Msg: "request head exceeds 16384 bytes or 100 fields"}
	ErrVersion        = &Error{Status: 505, Code: "http_version_not_supported", Msg: "only HTTP/1.0 and HTTP/1.1 are served"}
	ErrCoding         = &Error{Status: 501, Code: "not_implemented", Msg: "transfer coding not implemented (only chunked)"}
	ErrExpect         = &Error{Status: 417, Code: "expectation_failed", Msg: "only Expect: 100-continue is supported"}
)

// Request is a parsed request head. Spans index the parse buffer.
type Request struct {
	Size   int // bytes of the head, leading blank lines and final CRLF included
	Method Span
	Target Span // the request target as sent
	// URI is the target in origin-form (path and query); for an
	// absolute-form target it is what follows the authority, possibly
	// empty (then "/" is meant).
	URI      Span
	Path     Span // URI without its query
	Abs      bool // absolute-form target
	Asterisk bool // "*" (OPTIONS only)
	Minor    byte // HTTP/1.<Minor>, 0 or 1
	// ContentLength is -1 without a Content-Length field.
	ContentLength  int64
	Chunked        bool // Transfer-Encoding: chunked
	ExpectContinue bool // Expect: 100-continue (HTTP/1.1)
	// Close: the connection ends after this exchange (Connection: close,
	// or HTTP/1.0 without Connection: keep-alive).
	Close bool
	Host  Span
	hosts int
	NF    int
	Names [MaxFields]Span
	Vals  [MaxFields]Span
	// Nominated are the field names the Connection header lists (RFC
	// 9110 §7.6.1): they concern this connection only.
	Nominated  [MaxNominated]Span
	NN         int
	keepAlive  bool
	te         bool // some Transfer-Encoding
	badExpect  bool
	next       int32 // offset of the next line to parse
	started    bool  // the request line has been parsed
	lineChecks int32 // bytes of an incomplete line already checked
}

// Reset readies r for the next request's head.
func (r *Request) Reset() {
	r.Size, r.NF, r.NN, r.hosts = 0, 0, 0, 0
	r.Method, r.Target, r.URI, r.Path, r.Host = Span{}, Span{}, Span{}, Span{}, Span{}
	r.Abs, r.Asterisk, r.Chunked, r.ExpectContinue, r.Close = false, false, false, false, false
	r.keepAlive, r.te, r.badExpect, r.started = false, false, false, false
	r.Minor, r.ContentLength = 0, -1
	r.next, r.lineChecks = 0, 0
}

// ParseRequest continues parsing the request head at the start of b,
// which holds every byte received so far (b grows between calls; call
// Reset before a new request). It returns More, OK, or Bad with the
// refusal. Lines are checked as they complete, so a bad byte is refused
// as soon as it arrives, not when the head ends, and no byte is looked at
// twice however slowly the head comes.
func ParseRequest(b []byte, r *Request) (int, *Error) {
	for {
		off := int(r.next)
		if off >= MaxHeadBytes && off < len(b) {
			return Bad, ErrTooLarge
		}
		nl := bytes.IndexByte(b[off:], '\n')
		if nl < 0 {
			// Incomplete line: check what came (a bare CR or a control
			// byte is refused now, not after the read timeout).
			rest := b[off:]
			for i := int(r.lineChecks); i < len(rest); i++ {
				if c := rest[i]; c == '\r' && i+1 < len(rest) {
					return Bad, ErrBareCR
				} else if c < 0x20 && c != '\t' && c != '\r' || c == 0x7f {
					if r.started {
						return Bad, ErrFieldValue
					}
					return Bad, ErrRequestLine
				}
			}
			r.lineChecks = int32(len(rest))
			if len(b) > MaxHeadBytes {
				return Bad, ErrTooLarge
			}
			return More, nil
		}
		end := off + nl // index of '\n'
		if end+1 > MaxHeadBytes {
			return Bad, ErrTooLarge
		}
		if nl == 0 || b[end-1] != '\r' {
			return Bad, ErrBareLF
		}
		line := b[off : end-1]
		r.next, r.lineChecks = int32(end+1), 0
		if !r.started {
			if len(line) == 0 {
				// RFC 9112 §2.2: blank lines before the request line are
				// ignored (a few; an endless run is refused by the limit).
				continue
			}
			if err := r.requestLine(b, int32(off), line); err != nil {
				return Bad, err
			}
			r.started = true
			continue
		}
		if len(line) == 0 {
			r.Size = end + 1
			if err := r.finish(); err != nil {
				return Bad, err
			}
			return OK, nil
		}
		if err := r.field(b, int32(off), line); err != nil {
			return Bad, err
		}
	}
}

// requestLine parses METHOD SP request-target SP HTTP-version.
func (r *Request) requestLine(b []byte, off int32, line []byte) *Error {
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 || !isToken(line[:sp1]) {
		return ErrRequestLine
	}
	r.Method = Span{off, off + int32(sp1)}
	rest := line[sp1+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 <= 0 {
		return ErrRequestLine
	}
	r.Target = Span{r.Method.End + 1, r.Method.End + 1 + int32(sp2)}
	v := rest[sp2+1:]
	// HTTP-version = "HTTP/" DIGIT "." DIGIT, case-sensitive.
	if len(v) != 8 || string(v[:5]) != "HTTP/" || v[6] != '.' || !isDigit(v[5]) || !isDigit(v[7]) {
		return ErrRequestLine
	}
	if v[5] != '1' || v[7] > '1' {
		return ErrVersion
	}
	r.Minor = v[7] - '0'
	return r.target(b)
}

// target classifies and checks the request target (RFC 9112 §3.2).
func (r *Request) target(b []byte) *Error {
	t := r.Target.Of(b)
	switch {
	case t[0] == '/':
		r.URI = r.Target
	case len(t) == 1 && t[0] == '*':
		if string(r.Method.Of(b)) != "OPTIONS" {
			return ErrTarget // asterisk-form is for OPTIONS only
		}
		r.Asterisk = true
		return nil
	default:
		// absolute-form: http(s)://authority[path-abempty][?query]. Its
		// authority is checked and then ignored: kvca decides the Host
		// it sends.
		i := bytes.Index(t, []byte("://"))
		if i <= 0 || !(equalFold(t[:i], "http") || equalFold(t[:i], "https")) {
			if string(r.Method.Of(b)) == "CONNECT" && validAuthority(t) {
				return nil // authority-form: refused by the router, not here
			}
			return ErrTarget
		}
		auth := t[i+3:]
		j := bytes.IndexAny(auth, "/?")
		if j < 0 {
			j = len(auth)
		}
		if j == 0 || !validAuthority(auth[:j]) {
			return ErrTarget
		}
		start := r.Target.Off + int32(i+3+j)
		r.URI = Span{start, r.Target.End}
		r.Abs = true
	}
	u := r.URI.Of(b)
	q := len(u)
	for i := 0; i < len(u); i++ {
		c := u[i]
		switch {
		case c == '%':
			if i+2 >= len(u) || !isHex(u[i+1]) || !isHex(u[i+2]) {
				return ErrTarget
			}
			i += 2
		case c == '?':
			if q == len(u) {
				q = i
			}
		case !pchar[c] && c != '/':
			return ErrTarget
		}
	}
	r.Path = Span{r.URI.Off, r.URI.Off + int32(q)}
	return nil
}

// field parses one field line.
func (r *Request) field(b []byte, off int32, line []byte) *Error {
	if line[0] == ' ' || line[0] == '\t' {
		return ErrObsFold
	}
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 || !isToken(line[:colon]) {
		return ErrFieldName
	}
	if r.NF == MaxFields {
		return ErrTooLarge
	}
	v := line[colon+1:]
	vs := 0
	for vs < len(v) && (v[vs] == ' ' || v[vs] == '\t') {
		vs++
	}
	ve := len(v)
	for ve > vs && (v[ve-1] == ' ' || v[ve-1] == '\t') {
		ve--
	}
	v = v[vs:ve]
	if !validValue(v) {
		if bytes.IndexByte(v, '\r') >= 0 {
			return ErrBareCR
		}
		return ErrFieldValue
	}
	name := Span{off, off + int32(colon)}
	val := Span{off + int32(colon+1+vs), off + int32(colon+1+ve)}
	r.Names[r.NF], r.Vals[r.NF] = name, val
	r.NF++
	n := name.Of(b)
	switch len(n) {
	case 4:
		if equalFold(n, "host") {
			r.hosts++
			r.Host = val
		}
	case 6:
		if equalFold(n, "expect") {
			if equalFold(v, "100-continue") {
				r.ExpectContinue = true
			} else {
				r.badExpect = true
			}
		}
	case 10:
		if equalFold(n, "connection") {
			return r.connection(b, val)
		}
	case 14:
		if equalFold(n, "content-length") {
			if r.ContentLength >= 0 {
				return ErrTwoLengths
			}
			l, ok := ParseLength(v)
			if !ok {
				return ErrLength
			}
			r.ContentLength = l
		}
	case 17:
		if equalFold(n, "transfer-encoding") {
			return r.transferEncoding(v)
		}
	}
	return nil
}

// transferEncoding accepts exactly one coding in all: chunked.
func (r *Request) transferEncoding(v []byte) *Error {
	for len(v) > 0 {
		var c []byte
		c, v = nextToken(v)
		switch {
		case len(c) == 0:
			return ErrChunkedNotLast
		case r.Chunked:
			return ErrChunkedNotLast // something after chunked, or chunked twice
		case equalFold(c, "chunked"):
			if r.te {
				return ErrCoding // another coding before chunked
			}
			r.Chunked = true
		default:
			r.te = true
		}
	}
	if !r.Chunked && !r.te {
		return ErrChunkedNotLast // an empty field
	}
	r.te = true
	return nil
}

// connection records the Connection header's options.
func (r *Request) connection(b []byte, val Span) *Error {
	v := val.Of(b)
	off := val.Off
	for len(v) > 0 {
		i := bytes.IndexByte(v, ',')
		if i < 0 {
			i = len(v)
		}
		t := v[:i]
		s, e := 0, len(t)
		for s < e && (t[s] == ' ' || t[s] == '\t') {
			s++
		}
		for e > s && (t[e-1] == ' ' || t[e-1] == '\t') {
			e--
		}
		if e > s {
			tok := t[s:e]
			if !isToken(tok) {
				return ErrConnection
			}
			switch {
			case equalFold(tok, "close"):
				r.Close = true
			case equalFold(tok, "keep-alive"):
				r.keepAlive = true
			}
			if r.NN == MaxNominated {
				return ErrConnection
			}
			r.Nominated[r.NN] = Span{off + int32(s), off + int32(e)}
			r.NN++
		}
		if i == len(v) {
			break
		}
		v = v[i+1:]
		off += int32(i + 1)
	}
	return nil
}

// finish applies the rules that need the whole head.
func (r *Request) finish() *Error {
	switch {
	case r.hosts > 1:
		return ErrTwoHosts
	case r.hosts == 0 && r.Minor == 1:
		return ErrNoHost
	case r.te && r.Minor == 0:
		return ErrTEVersion
	case r.te && r.ContentLength >= 0:
		return ErrLengthAndTE
	case r.te && !r.Chunked:
		return ErrChunkedNotLast
	case r.badExpect && r.Minor == 1:
		return ErrExpect
	}
	if r.Minor == 0 {
		r.ExpectContinue = false // RFC 9110 §10.1.1: ignored in HTTP/1.0
		r.Close = r.Close || !r.keepAlive
	}
	return nil
}

// CheckHost reports whether the Host field, if any, is a valid uri-host
// [":" port]. An empty one is refused too: every target kvca serves has
// an authority (RFC 9112 §3.2 allows it empty only when there is none).
func (r *Request) CheckHost(b []byte) bool {
	return r.hosts == 0 || validAuthority(r.Host.Of(b))
}

// Get returns the value of the last field called name (lower case), or
// nil.
func (r *Request) Get(b []byte, name string) []byte {
	var v []byte
	for i := 0; i < r.NF; i++ {
		if n := r.Names[i].Of(b); equalFold(n, name) {
			v = r.Vals[i].Of(b)
		}
	}
	return v
}

// HasBody reports whether a body follows the head.
func (r *Request) HasBody() bool { return r.Chunked || r.ContentLength > 0 }

// IsNominated reports whether the Connection header lists name.
func (r *Request) IsNominated(b, name []byte) bool {
	for i := 0; i < r.NN; i++ {
		if n := r.Nominated[i].Of(b); len(n) == len(name) && equalFoldBytes(n, name) {
			return true
		}
	}
	return false
}

// ParseLength parses a Content-Length value: 1 to 15 digits.
func ParseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// nextToken returns the first element of a comma-separated list, without
// blanks, and the rest of the list.
func nextToken(v []byte) (tok, rest []byte) {
	i := bytes.IndexByte(v, ',')
	if i < 0 {
		tok, rest = v, nil
	} else {
		tok, rest = v[:i], v[i+1:]
	}
	return bytes.TrimSpace(tok), rest
}

// validValue reports whether v holds only field-value bytes: VCHAR,
// obs-text, SP and HTAB.
//
// Eight bytes are tested at a time (the classic SWAR tests for a byte
// below 0x20 and a byte equal to 0x7f, exact as to whether there is one);
// only a word that has one, a tab most likely, is looked at byte by byte.
func validValue(v []byte) bool {
	const lsb, msb = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(v); i += 8 {
		x := binary.LittleEndian.Uint64(v[i:])
		del := x ^ (0x7f * lsb)
		if ((x-0x20*lsb)&^x|(del-lsb)&^del)&msb != 0 && !validBytes(v[i:i+8]) {
			return false
		}
	}
	return validBytes(v[i:])
}

func validBytes(v []byte) bool {
	for _, c := range v {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// validAuthority checks uri-host [":" port]: a reg-name or an IP literal.
func validAuthority(a []byte) bool {
	if len(a) == 0 {
		return false
	}
	host := a
	if a[0] == '[' {
		e := bytes.IndexByte(a, ']')
		if e < 2 {
			return false
		}
		for _, c := range a[1:e] {
			if !isHex(c) && c != ':' && c != '.' {
				return false
			}
		}
		host = nil
		a = a[e+1:]
		if len(a) > 0 && a[0] != ':' {
			return false
		}
	} else if i := bytes.LastIndexByte(a, ':'); i >= 0 {
		host, a = a[:i], a[i:]
	} else {
		a = nil
	}
	// A reg-name may carry pct-encoded bytes (RFC 3986 §3.2.2), but no
	// host kvca or a backend answers to is spelled so, and decoders
	// disagree on them (%00 among them): refused.
	for _, c := range host {
		if !unreserved[c] && !subDelim[c] {
			return false
		}
	}
	if len(a) > 0 { // ":" port
		if len(a) > 6 {
			return false
		}
		for _, c := range a[1:] {
			if !isDigit(c) {
				return false
			}
		}
	}
	return true
}

func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tchar[c] {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || c|0x20 >= 'a' && c|0x20 <= 'f' }

// equalFold compares b with the lower-case ASCII s, ignoring b's case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if lower(b[i]) != s[i] {
			return false
		}
	}
	return true
}

// EqualFold compares b with the lower-case ASCII s, ignoring b's case.
func EqualFold(b []byte, s string) bool { return equalFold(b, s) }

func equalFoldBytes(a, b []byte) bool {
	for i := range a {
		if lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// Character classes (RFC 9110 §5.6.2, RFC 3986 §2-3). Built once, never
// written after.
var tchar, pchar, unreserved, subDelim = func() (t, p, u, s [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], u[c] = true, true
		t[c-'a'+'A'], u[c-'a'+'A'] = true, true
	}
	for c := '0'; c <= '9'; c++ {
		t[c], u[c] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	for _, c := range "-._~" {
		u[c] = true
	}
	for _, c := range "!$&'()*+,;=" {
		s[c] = true
	}
	for c := range 256 {
		p[c] = u[c] || s[c]
	}
	p[':'], p['@'] = true, true
	return
}()
