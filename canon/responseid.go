package canon

// ResponseIDScanner finds a Responses API response's id in the answer as it
// streams past, so the proxy can remember which backend produced it: the
// top-level "id" of a JSON response object, or, in an SSE stream, the
// "id" of the "response" object of the first event that has one
// (response.created, sent first). Feed it the body in pieces of any size;
// it keeps no reference to them and allocates nothing.
//
// It tracks only JSON nesting, strings and keys, not the whole grammar: a
// malformed answer can at worst yield no id or a wrong one, which costs the
// continuation a failover, never a wrong answer.
type ResponseIDScanner struct {
	stream bool
	done   bool
	depth  int
	inStr  bool
	esc    bool
	// colon: the last significant byte was ':', so a string starting now
	// is a value of key.
	colon bool
	// str collects the string being read, up to len(str) bytes; long
	// strings are never keys or ids that matter.
	str  [maxResponseID]byte
	n    int
	over bool
	// key is the latest complete key string at each depth that matters.
	key   [3]keyName
	isVal bool // the string being read is a value
	id    [maxResponseID]byte
	idLen int
	seen  int
}

type keyName uint8

const (
	keyOther keyName = iota
	keyID
	keyResponse
)

// maxResponseID bounds the id kept; OpenAI's and vLLM's ids are well under.
const maxResponseID = 128

// maxScan bounds how far into a non-streaming answer the id is looked
// for: it is the object's first member in every server's answers.
const maxScan = 64 << 10

// Reset prepares s for an answer; stream says it is an SSE stream
// (Content-Type text/event-stream), else a JSON object.
func (s *ResponseIDScanner) Reset(stream bool) { *s = ResponseIDScanner{stream: stream} }

// ID returns the id found so far, nil if none; valid until Reset.
func (s *ResponseIDScanner) ID() []byte {
	if s.idLen == 0 {
		return nil
	}
	return s.id[:s.idLen]
}

// Done reports whether scanning further is useless: the id was found, or
// a JSON answer went on too long without one.
func (s *ResponseIDScanner) Done() bool { return s.done }

// Write scans p.
func (s *ResponseIDScanner) Write(p []byte) {
	if s.done {
		return
	}
	last := false
	if !s.stream {
		// Exactly maxScan bytes, however the answer is split.
		if room := maxScan - s.seen; len(p) >= room {
			p, last = p[:max(room, 0)], true
		}
		s.seen += len(p)
	}
	s.scan(p)
	if last {
		s.done = true
	}
}

func (s *ResponseIDScanner) scan(p []byte) {
	for _, c := range p {
		if s.inStr {
			switch {
			case s.esc:
				s.esc = false
				s.over = true // ids never need escapes; an escaped string is not one
			case c == '\\':
				s.esc = true
			case c == '"':
				s.inStr = false
				if s.endString() {
					return
				}
			default:
				if s.n < len(s.str) {
					s.str[s.n] = c
					s.n++
				} else {
					s.over = true
				}
			}
			continue
		}
		switch c {
		case '"':
			s.inStr, s.n, s.over = true, 0, false
			s.isVal = s.colon
			s.colon = false
		case ':':
			s.colon = true
		case '{', '[':
			s.depth++
			if s.depth < len(s.key) {
				s.key[s.depth] = keyOther
			}
			s.colon = false
		case '}', ']':
			if s.depth > 0 {
				s.depth--
			}
			s.colon = false
		case ' ', '\t', '\r', '\n':
		default:
			s.colon = false
		}
	}
}

// endString handles a complete string; true once the id is found.
func (s *ResponseIDScanner) endString() bool {
	if !s.isVal {
		// A key (or an array element, which no later ':' follows).
		if s.depth < len(s.key) {
			k := keyOther
			switch {
			case s.over:
			case string(s.str[:s.n]) == "id":
				k = keyID
			case string(s.str[:s.n]) == "response":
				k = keyResponse
			}
			s.key[s.depth] = k
		}
		return false
	}
	want := 1
	if s.stream {
		// data: {"type":"response.created","response":{"id":...}}
		want = 2
	}
	if s.depth != want || s.key[s.depth] != keyID || s.over || s.n == 0 || (s.stream && s.key[1] != keyResponse) {
		return false
	}
	s.idLen = copy(s.id[:], s.str[:s.n])
	s.done = true
	return true
}
