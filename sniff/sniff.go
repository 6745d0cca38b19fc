// Package sniff reads an inference answer's body as it streams through the
// proxy and picks out what the front door needs from it: the token usage
// the backend reports, how much of the prompt its engine found in its
// prefix cache, and the answer's id. It takes the bytes in whatever
// pieces they arrive, cut anywhere, keeps a fixed-size state (no buffering
// of the body, nothing allocated once the state exists), and skips string
// contents with vectorised searches, so the cost per byte stays small
// beside the copy the proxy makes anyway.
//
// Recognised, in a JSON body or in each event of an SSE stream:
//
//	usage.prompt_tokens, usage.completion_tokens       OpenAI chat/completions (a stream's final chunk too)
//	usage.input_tokens, usage.output_tokens            Responses API body; Anthropic Messages body and message_delta
//	response.usage.input_tokens, .output_tokens        Responses API stream: response.completed
//	message.usage.input_tokens, .output_tokens         Anthropic Messages stream: message_start
//	usage.cache_read_input_tokens, ...creation...      Anthropic's prompt cache (message.usage. in a stream)
//	usage.prompt_tokens_details.cached_tokens          prompt tokens read from the engine's cache: OpenAI
//	                                                   chat/completions (body, final chunk), vLLM, SGLang, llm-d
//	usage.input_tokens_details.cached_tokens           the same in a Responses API body
//	response.usage.input_tokens_details.cached_tokens  the same in a Responses API stream: response.completed
//	timings.cache_n                                    llama.cpp's server: prompt tokens reused from its cache
//	                                                   (body, and a stream's final chunk)
//	id, response.id, message.id                        the answer's id (Responses API: the body's or response.created's)
//
// The paths are rooted at the top-level object; the last value seen wins
// for tokens (Anthropic's message_delta carries the final output count),
// the first for the id. Keys written with escapes are not recognised, nor
// are numbers that are not whole; a body that is not JSON yields nothing.
// Usage and CacheTokens report the usage counts; EngineCached reports the
// cached part of the prompt (OpenAI's cached_tokens first, then
// Anthropic's cache_read_input_tokens, then llama.cpp's cache_n).
package sniff

import (
	"bytes"
)

// Format says how the body is framed.
type Format uint8

const (
	// JSON: one JSON value (or several in a row), as a non-streamed answer.
	JSON Format = 0
	// SSE: a text/event-stream; each event's data lines hold one JSON value.
	// Lines end in LF or CRLF.
	SSE Format = 1 << 0
)

// Bounds of the state.
const (
	// MaxDepth is the deepest nesting followed; a deeper value makes the
	// rest of the document (the SSE event, or the body) be ignored.
	MaxDepth = 256
	// MaxID is the longest id kept; a longer one is not reported.
	MaxID = 128
)

// Sniffer is the reusable state of one answer: Reset it per answer; its
// size is fixed.
type Sniffer struct {
	format Format
	broken bool // framing error: nothing more is read

	// SSE lines
	ls       uint8
	fieldPos uint8
	lineLen  int
	lastByte byte

	// JSON
	js     uint8
	depth  int
	kinds  [MaxDepth / 64]uint64 // bit set: object, clear: array
	masks  [maxLevels]uint32     // targets alive at each object level
	leaf   uint32                // targets the next value completes
	deeper uint32                // targets the next value leads on to
	esc    bool                  // a string's backslash ended the last piece
	sawEsc bool
	klen   int
	kbuf   [maxKey]byte
	skip   int // bracket depth inside a skipped value
	num    int64
	numOK  bool
	idCap  bool
	idLen  int

	prompt, completion       int64
	cacheRead, cacheCreate   int64
	cachedTokens             int64 // OpenAI's ..._tokens_details.cached_tokens
	timingsCache             int64 // llama.cpp's timings.cache_n
	hasPrompt, hasCompletion bool
	hasCacheRead             bool
	hasCachedTokens          bool
	hasTimingsCache          bool
	idSet                    bool
	id                       [MaxID]byte
}

// Reset readies s for an answer framed as f.
func (s *Sniffer) Reset(f Format) {
	*s = Sniffer{format: f}
}

// Usage returns the token counts found; ok is false when the answer
// reported none. prompt is the whole prompt: with Anthropic's usage, whose
// input_tokens leaves out what was read from or written to its prompt
// cache, those counts are added in (OpenAI's prompt_tokens and
// input_tokens already include cached tokens).
func (s *Sniffer) Usage() (prompt, completion int64, ok bool) {
	return s.prompt + s.cacheRead + s.cacheCreate, s.completion, s.hasPrompt || s.hasCompletion
}

// CacheTokens returns Anthropic's cache_read_input_tokens and
// cache_creation_input_tokens, the part of Usage's prompt the engine did
// not compute (read) or stored for later (creation); 0 when not reported.
func (s *Sniffer) CacheTokens() (read, creation int64) { return s.cacheRead, s.cacheCreate }

// EngineCached returns the prompt tokens the engine reported as read from
// its prefix cache rather than computed; ok is false when the answer
// carried no such count at all, so that an engine reporting nothing is
// told apart from one reporting 0. When an answer carries several
// shapes, the first present in this order is taken:
//
//  1. OpenAI's cached_tokens (usage.prompt_tokens_details, or
//     input_tokens_details in the Responses API), which vLLM, SGLang and
//     llama.cpp's OpenAI-compatible answers also use;
//  2. Anthropic's cache_read_input_tokens (the read of CacheTokens);
//  3. llama.cpp's timings.cache_n.
//
// Within one shape the last value seen wins, as for Usage. A field
// written as null, or as a number that is not whole, counts as absent.
func (s *Sniffer) EngineCached() (tokens int64, ok bool) {
	switch {
	case s.hasCachedTokens:
		return s.cachedTokens, true
	case s.hasCacheRead:
		return s.cacheRead, true
	case s.hasTimingsCache:
		return s.timingsCache, true
	}
	return 0, false
}

// ID returns the answer's id, or nil; it aliases s until the next Reset.
func (s *Sniffer) ID() []byte {
	if !s.idSet {
		return nil
	}
	return s.id[:s.idLen]
}

// Feed reads the next bytes of the body. p is not retained.
func (s *Sniffer) Feed(p []byte) {
	if s.broken {
		return
	}
	s.body(p)
}

func (s *Sniffer) body(p []byte) {
	if s.format&SSE == 0 {
		s.json(p)
		return
	}
	for len(p) > 0 {
		nl := bytes.IndexByte(p, '\n')
		if nl < 0 {
			s.line(p)
			return
		}
		if k := s.skippable(p, nl); k > 0 {
			p = p[k:]
			continue
		}
		s.line(p[:nl])
		s.endLine()
		p = p[nl+1:]
	}
}

// skippable returns how many bytes of p (from a line's start, its first
// LF at nl) make up a whole one-line event that cannot hold anything
// recognised, or 0: a data line without a "usage" object (every token
// path but llama.cpp's passes through that key), nor a "timings" object
// (llama.cpp's timings.cache_n), nor, while the id is unknown, an "id",
// followed by the blank line that ends the event. Reading it would change
// nothing, as the event's end resets the JSON state; most events of a
// stream are such, and a search for a few words is far cheaper than
// tokenizing them. A line cut across pieces is read in full instead, to
// the same effect.
func (s *Sniffer) skippable(p []byte, nl int) int {
	if s.ls != lsStart || s.lineLen != 0 || s.js != jValue || s.depth != 0 || nl < len(dataField) ||
		string(p[:len(dataField)]) != dataField {
		return 0
	}
	end := nl + 1
	line := p[:nl]
	switch {
	case end < len(p) && p[end] == '\n':
		end++
	case nl > 0 && p[nl-1] == '\r' && end+1 < len(p) && p[end] == '\r' && p[end+1] == '\n':
		end += 2
	default:
		return 0 // the event may go on, or its end is in the next piece
	}
	if (!s.idSet && bytes.Contains(line, []byte(`"id"`))) || watchedObject(line) {
		return 0
	}
	return end
}

// watchedObject reports whether line may hold a "usage" or a "timings"
// key with an object for its value: OpenAI's streams carry "usage":null
// in every chunk but the last, and only an object can hold token counts.
// Both keys hold a g, a letter rare in JSON text (unlike the u of every
// null), so one vectorised search for it finds either, in long strides.
func watchedObject(line []byte) bool {
	for i := 0; ; {
		k := bytes.IndexByte(line[i:], 'g')
		if k < 0 {
			return false
		}
		g := i + k
		i = g + 1
		if !hasAt(line, g-len(`usa`), `usage"`) && !hasAt(line, g-len(`timin`), `timings"`) {
			continue
		}
		j := g + len(`ge"`) // both keys end so
		for j < len(line) && isSpace(line[j]) {
			j++
		}
		if j == len(line) || line[j] != ':' {
			continue // not a key
		}
		j++
		for j < len(line) && isSpace(line[j]) {
			j++
		}
		if j == len(line) || line[j] == '{' {
			return true
		}
	}
}

// hasAt reports whether line holds s at offset at.
func hasAt(line []byte, at int, s string) bool {
	return at >= 0 && len(line)-at >= len(s) && string(line[at:at+len(s)]) == s
}

// SSE line states.
const (
	lsStart = iota // matching the field name against "data:"
	lsData         // in a data line's value
	lsSkip         // in another field's line, or a comment
)

const dataField = "data:"

func (s *Sniffer) line(p []byte) {
	if len(p) == 0 {
		return
	}
	s.lineLen += len(p)
	s.lastByte = p[len(p)-1]
	if s.ls == lsStart {
		i := 0
		for i < len(p) && s.fieldPos < uint8(len(dataField)) {
			if p[i] != dataField[s.fieldPos] {
				s.ls = lsSkip
				return
			}
			s.fieldPos++
			i++
		}
		if s.fieldPos < uint8(len(dataField)) {
			return
		}
		s.ls = lsData
		p = p[i:]
	}
	if s.ls == lsData {
		s.json(p)
	}
}

func (s *Sniffer) endLine() {
	if s.lineLen == 0 || (s.lineLen == 1 && s.lastByte == '\r') {
		// A blank line ends the event, and its JSON with it.
		s.js, s.depth, s.leaf, s.deeper, s.esc = jValue, 0, 0, 0, false
	} else if s.ls == lsData {
		// Data lines join with a newline, which ends a number or literal.
		s.space()
	}
	s.ls, s.fieldPos, s.lineLen = lsStart, 0, 0
}

// Close marks the end of the body, which the Sniffer cannot see: a
// top-level number the body ends with is taken.
func (s *Sniffer) Close() {
	if !s.broken {
		s.space()
	}
}
