// Package streamusage asks an engine for a streamed answer's token usage
// on the client's behalf, and takes back out of the answer what the
// asking added.
//
// A streamed chat or completions answer reports its usage (and with it
// the engine's cached-token count) only in a final event the client asked
// for with "stream_options":{"include_usage":true}, which the OpenAI SDKs
// do not send by default. Plan finds the edit of a request body that asks
// for it; a Filter removes from the answer the usage-only event the edit
// caused, so that the client receives the bytes it would have received
// without the edit. Neither allocates. docs/routing.md, "Checking the
// prediction against the engine", says when kvca asks.
package streamusage

import "bytes"

// Edit rewrites a request body: body[:At], then Insert, then body[End:].
// The zero Edit changes nothing.
type Edit struct {
	At, End int
	Insert  string
}

// What an Edit inserts.
const (
	// askMember opens the top-level object when the body has no
	// stream_options: first, so that no byte of the body moves but the
	// opening brace.
	askMember = `"stream_options":{"include_usage":true},`
	askObject = `{"include_usage":true}` // for "stream_options":null
	askFirst  = `"include_usage":true,`  // into stream_options' members
	askOnly   = `"include_usage":true`   // into an empty stream_options
	askTrue   = `true`                   // include_usage's value, which was not true
)

// Asks reports whether e edits the body (asks for usage).
func (e Edit) Asks() bool { return e.Insert != "" }

// Len is the length of an n-byte body once edited.
func (e Edit) Len(n int) int { return n - (e.End - e.At) + len(e.Insert) }

// Append appends body edited to dst.
func (e Edit) Append(dst, body []byte) []byte {
	if !e.Asks() {
		return append(dst, body...)
	}
	dst = append(dst, body[:e.At]...)
	dst = append(dst, e.Insert...)
	return append(dst, body[e.End:]...)
}

// Plan returns the edit that makes body, a chat or completions request,
// ask for a streamed answer's usage, or the zero Edit when it should stay
// as it is:
//
//   - not streamed: the top-level "stream" is not true (the last of
//     several wins, as in the engines' JSON parsers);
//   - the client asked already: stream_options.include_usage is true;
//   - the client asked for continuous_usage_stats (any value but false or
//     null): with include_usage the engine would add usage to every
//     chunk, which the client would then receive;
//   - stream_options is neither an object nor null (the engine refuses
//     the request as it stands), or the body cannot be read (a key
//     written with escapes may spell one of the names above).
//
// Otherwise stream_options gets "include_usage":true, its other members
// kept; a body without it gets "stream_options":{"include_usage":true}
// as its first member. The edit never touches the prompt: the CBR leaves
// stream_options out (canon's generation-only fields), so the chain is
// the same either way.
//
// promptKey and promptEnd (canon.Info.PromptEnd, 0: unknown) let Plan
// jump over the prompt array, which holds most of a large body, instead
// of scanning it: the other top-level members cost little to read.
func Plan(body []byte, promptKey string, promptEnd int) Edit {
	open := skipSpace(body, 0)
	if open == len(body) || body[open] != '{' {
		return Edit{}
	}
	var stream []byte
	soAt, soEnd := -1, -1
	ok := members(body, open, func(key []byte, vs int) int {
		if string(key) == promptKey && promptEnd > vs && promptEnd < len(body) && body[vs] == '[' && body[promptEnd] == ']' {
			return promptEnd + 1
		}
		ve := skipValue(body, vs)
		switch string(key) {
		case "stream":
			if ve > 0 {
				stream = body[vs:ve]
			}
		case "stream_options":
			soAt, soEnd = vs, ve
		}
		return ve
	})
	if !ok || string(stream) != "true" {
		return Edit{}
	}
	if soAt < 0 {
		return Edit{At: open + 1, End: open + 1, Insert: askMember}
	}
	return planOptions(body, soAt, soEnd)
}

// planOptions is the edit of a stream_options value at body[at:end].
func planOptions(body []byte, at, end int) Edit {
	v := body[at:end]
	if string(v) == "null" {
		return Edit{At: at, End: end, Insert: askObject}
	}
	if v[0] != '{' {
		return Edit{}
	}
	if i := skipSpace(body, at+1); body[i] == '}' {
		return Edit{At: at + 1, End: at + 1, Insert: askOnly}
	}
	uAt, uEnd := -1, -1
	continuous := false
	ok := members(body, at, func(key []byte, vs int) int {
		ve := skipValue(body, vs)
		if ve < 0 {
			return ve
		}
		switch string(key) {
		case "include_usage":
			uAt, uEnd = vs, ve
		case "continuous_usage_stats":
			val := string(body[vs:ve])
			continuous = val != "false" && val != "null"
		}
		return ve
	})
	switch {
	case !ok || continuous:
		return Edit{}
	case uAt < 0:
		return Edit{At: at + 1, End: at + 1, Insert: askFirst}
	case string(body[uAt:uEnd]) == "true":
		return Edit{} // the client asked
	}
	return Edit{At: uAt, End: uEnd, Insert: askTrue}
}

// members walks the members of the object whose opening brace is at
// body[open], calling value with each key and the offset of its value's
// first byte; value returns the offset just past the value (negative:
// unreadable). false when the object cannot be read to its closing brace
// or a key holds an escape.
func members(body []byte, open int, value func(key []byte, vs int) int) bool {
	i := skipSpace(body, open+1)
	if i < len(body) && body[i] == '}' {
		return true
	}
	for {
		if i == len(body) || body[i] != '"' {
			return false
		}
		ke := stringEnd(body, i+1)
		if ke < 0 {
			return false
		}
		key := body[i+1 : ke]
		if bytes.IndexByte(key, '\\') >= 0 {
			return false
		}
		i = skipSpace(body, ke+1)
		if i == len(body) || body[i] != ':' {
			return false
		}
		vs := skipSpace(body, i+1)
		if vs == len(body) {
			return false
		}
		ve := value(key, vs)
		if ve < 0 {
			return false
		}
		i = skipSpace(body, ve)
		if i == len(body) {
			return false
		}
		switch body[i] {
		case '}':
			return true
		case ',':
			i = skipSpace(body, i+1)
		default:
			return false
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpace is the offset of the first byte at or after i that is not
// JSON whitespace (len(b) if none).
func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// stringEnd is the offset of the quote closing the string whose content
// starts at b[i], or -1: only a quote after an even run of backslashes
// closes it, so escapes cost nothing but the search for the next quote.
func stringEnd(b []byte, i int) int {
	start := i
	for {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return -1
		}
		j := i + q
		k := j
		for k > start && b[k-1] == '\\' {
			k--
		}
		if (j-k)%2 == 0 {
			return j
		}
		i = j + 1
	}
}

// stops marks the bytes a skipped object or array stops at.
var stops = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true}

// skipValue is the offset just past the JSON value starting at b[i], or
// -1 when b ends first. The body has been parsed as JSON already
// (canon), so brackets are matched by depth alone.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		if e := stringEnd(b, i+1); e >= 0 {
			return e + 1
		}
		return -1
	case '{', '[':
		depth := 0
		for i < len(b) {
			for i < len(b) && !stops[b[i]] {
				i++
			}
			if i == len(b) {
				break
			}
			switch b[i] {
			case '"':
				e := stringEnd(b, i+1)
				if e < 0 {
					return -1
				}
				i = e
			case '{', '[':
				depth++
			default:
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	// A number or a literal: up to the next delimiter.
	j := i
	for j < len(b) && !isSpace(b[j]) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
		j++
	}
	if j == i || j == len(b) {
		return -1
	}
	return j
}
