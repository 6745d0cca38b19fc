package streamusage

import (
	"bytes"
	"encoding/json"

	"github.com/valyala/fastjson"
)

// MaxHold is the longest event a Filter removes. An event is held back
// while it may still be the usage event (until its "choices" or "usage"
// says otherwise, or it ends), so that no byte of it reaches the client
// before that is known; one longer than MaxHold is passed on as it is.
// Engines' usage events are a few hundred bytes.
const MaxHold = 4096

// A Filter removes the usage-only events of an SSE stream and passes
// every other byte on unchanged, whatever pieces the stream arrives in.
// A usage-only event is what an engine sends last (before data: [DONE])
// when asked for a streamed answer's usage: one data line holding a JSON
// object whose top-level "choices" is an empty array and whose "usage" is
// an object, and the blank line ending it. vLLM, SGLang, llama.cpp's
// server and llm-d's simulator send it so (vLLM and SGLang with choices
// before usage, the simulator after).
//
// Members an engine adds to the other chunks are left as they are: vLLM
// and SGLang add none when asked, llm-d's simulator writes "usage":null
// in every chunk whether asked or not, and only the OpenAI API itself
// adds "usage":null to every chunk of a stream that asked (which no kvca
// backend is); the OpenAI SDKs read a null usage as none.
//
// The zero Filter is ready for a stream; its size is fixed, and it
// allocates nothing once dst has room.
type Filter struct {
	mode    uint8 // what the rest of the current event does
	ls      uint8 // where the current line is, to find the blank line ending an event
	held    int   // bytes of the current event in hold, while undecided
	tried   int   // held when it was last classified
	removed int
	hold    [MaxHold]byte
}

// Filter modes: the current event is being classified (its first held
// bytes in hold), or passed, or dropped, to its end.
const (
	modeStart = iota
	modePass
	modeDrop
)

// Line states.
const (
	lsStart = iota // a line's first byte comes next
	lsCR           // the line so far is a CR (a CRLF blank line begun)
	lsMid          // the line holds something
)

// Reset readies f for another stream.
func (f *Filter) Reset() { f.mode, f.ls, f.held, f.tried, f.removed = modeStart, lsStart, 0, 0, 0 }

// Removed is how many events f has removed.
func (f *Filter) Removed() int { return f.removed }

// Append filters the next piece of the stream, appending to dst what
// passes. At most len(p)+MaxHold bytes are appended: an event held back
// is released whole.
func (f *Filter) Append(dst, p []byte) []byte {
	for len(p) > 0 {
		k, ended := f.eventEnd(p)
		seg := p[:k]
		p = p[k:]
		switch f.mode {
		case modePass:
			dst = append(dst, seg...)
		case modeDrop:
		default:
			dst = f.classify(dst, seg, ended)
		}
		if ended {
			f.mode = modeStart
		}
	}
	return dst
}

// Close ends the stream: an event that never ended is passed on as it
// came.
func (f *Filter) Close(dst []byte) []byte {
	if f.mode == modeStart && f.held > 0 {
		dst = append(dst, f.hold[:f.held]...)
	}
	f.held, f.tried = 0, 0
	return dst
}

// classify takes seg, the next bytes of an event not yet decided (ended:
// its last), and decides it if it can: passed on, dropped, or held back.
func (f *Filter) classify(dst, seg []byte, ended bool) []byte {
	ev := seg
	n := f.held + len(seg)
	if f.held > 0 {
		c := copy(f.hold[f.held:], seg)
		ev = f.hold[:f.held+c]
	} else if len(ev) > MaxHold {
		ev = ev[:MaxHold]
	}
	v := undecided
	if ended || n >= MaxHold || n >= f.tried+f.tried/2+32 {
		// Classified again from its start only once it has grown by
		// half: an event trickling in byte by byte costs linear work,
		// not quadratic. An event arrives whole in practice.
		v = verdict(ev, ended && n <= MaxHold)
		f.tried = n
	}
	if v == undecided && n >= MaxHold {
		v = pass // too long to be held: whatever it is, it passes
	}
	switch v {
	case pass:
		dst = append(dst, f.hold[:f.held]...)
		dst = append(dst, seg...)
		f.held, f.tried = 0, 0
		f.mode = modePass
	case remove:
		f.held, f.tried = 0, 0
		f.removed++
		f.mode = modeDrop
	default:
		if f.held == 0 {
			copy(f.hold[:], seg)
		}
		f.held = n
	}
	return dst
}

// eventEnd scans p for the blank line that ends the current event: it
// returns how many bytes of p belong to the event and whether they end
// it. Lines end in LF or CRLF.
func (f *Filter) eventEnd(p []byte) (int, bool) {
	i := 0
	for i < len(p) {
		switch c := p[i]; {
		case c == '\n':
			i++
			blank := f.ls != lsMid
			f.ls = lsStart
			if blank {
				return i, true
			}
		case c == '\r' && f.ls == lsStart:
			i++
			f.ls = lsCR
		default:
			f.ls = lsMid
			j := bytes.IndexByte(p[i+1:], '\n')
			if j < 0 {
				return len(p), false
			}
			i += 1 + j
		}
	}
	return len(p), false
}

// usageKey ends the usage member's name as a usage event writes it,
// without its opening quote: a search for it skips from one 'u' to the
// next, where a JSON event has a '"' every few bytes.
const usageKey = `usage"`

// Verdicts on an event.
const (
	undecided = iota
	pass
	remove
)

// verdict decides from the first bytes of an event (whole: all of it,
// its blank line included) whether it is a usage-only event. Every verdict
// but undecided is final: more bytes could not change it, so that the
// decision does not depend on how the stream was cut.
func verdict(ev []byte, whole bool) int {
	more := undecided
	if whole {
		more = pass // nothing more comes: the event is not a usage event
		if !bytes.Contains(ev, []byte(usageKey)) {
			// A content chunk, the usual event: no usage member, so no
			// need to walk its members. (The walk below takes a key as
			// written, so an escaped "usage" is none either way.)
			return pass
		}
	}
	const field = "data:"
	if n := min(len(ev), len(field)); string(ev[:n]) != field[:n] {
		return pass
	}
	i := len(field)
	for i < len(ev) && ev[i] == ' ' {
		i++
	}
	if i >= len(ev) {
		return more
	}
	if ev[i] != '{' {
		return pass
	}
	obj := i
	choices, usage := false, false
	i = skipInline(ev, i+1)
	if i < len(ev) && ev[i] == '}' {
		return pass
	}
	for {
		if i == len(ev) {
			return more
		}
		if ev[i] != '"' {
			return pass
		}
		ke := stringEnd(ev, i+1)
		if ke < 0 {
			return more
		}
		key := ev[i+1 : ke]
		if i = skipInline(ev, ke+1); i == len(ev) {
			return more
		}
		if ev[i] != ':' {
			return pass
		}
		if i = skipInline(ev, i+1); i == len(ev) {
			return more
		}
		switch string(key) {
		case "choices":
			if ev[i] != '[' {
				return pass
			}
			if i = skipInline(ev, i+1); i == len(ev) {
				return more
			}
			if ev[i] != ']' {
				return pass
			}
			i++
			choices = true
		case "usage":
			if ev[i] != '{' {
				return pass // "usage":null: a chunk of an engine that writes it in every chunk
			}
			usage = true
			fallthrough
		default:
			e := skipValue(ev, i)
			if e < 0 {
				return more
			}
			i = e
		}
		if i = skipInline(ev, i); i == len(ev) {
			return more
		}
		if ev[i] == '}' {
			i++
			break
		}
		if ev[i] != ',' {
			return pass
		}
		i = skipInline(ev, i+1)
	}
	if !choices || !usage || bytes.IndexByte(ev[obj:i], '\n') >= 0 || bytes.IndexByte(ev[obj:i], '\r') >= 0 ||
		!validJSON(ev[obj:i]) {
		// On one line: the scan above skips nested values whole, and a
		// line end inside one ends the data line there (what follows is
		// another field, or a comment). Valid: the scan matched brackets
		// only. An event that is no JSON on one line is no engine's
		// usage; it goes on as it came.
		return pass
	}
	for i < len(ev) && (ev[i] == ' ' || ev[i] == '\t') {
		i++
	}
	// The data line's end, then the blank line: nothing else.
	rest := string(ev[i:])
	for _, end := range [...]string{"\n\n", "\n\r\n", "\r\n\n", "\r\n\r\n"} {
		if rest == end {
			if whole {
				return remove
			}
			return undecided
		}
		if len(rest) < len(end) && end[:len(rest)] == rest {
			return more
		}
	}
	return pass
}

// validJSON reports whether b is one JSON value, as encoding/json's Valid
// does, in a third of its time for an engine's usage event (700 ns was 2%
// of kvca's CPU for a 1 KB stream): fastjson's check, which accepts what
// encoding/json accepts but for a control byte in a string before one of
// its escapes (FuzzValidAsStd), so b with any control byte goes to
// encoding/json. This runs once a stream, on its usage event only.
func validJSON(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return json.Valid(b)
		}
	}
	return fastjson.ValidateBytes(b) == nil
}

// skipInline skips the JSON whitespace a data line can hold (a line end
// would end it: an event whose JSON spans lines is not a usage event).
func skipInline(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	return i
}
