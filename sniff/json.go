package sniff

import (
	"bytes"
	"math/bits"
)

// What a target's value is.
const (
	fPrompt = iota
	fCompletion
	fID
	fCacheRead    // Anthropic: prompt tokens read from the cache, not in input_tokens
	fCacheCreate  // Anthropic: prompt tokens written to the cache, not in input_tokens
	fCachedTokens // OpenAI: prompt tokens read from the cache, part of prompt_tokens/input_tokens
	fTimingsCache // llama.cpp: prompt tokens reused from the slot's cache (timings.cache_n)
)

type target struct {
	path  []string
	field int
}

// targets are the paths recognised, from the top-level object; at most 32
// (they are bits of a uint32), at most maxLevels deep, keys at most
// maxKey bytes.
var targets = [...]target{
	{[]string{"usage", "prompt_tokens"}, fPrompt},
	{[]string{"usage", "completion_tokens"}, fCompletion},
	{[]string{"usage", "input_tokens"}, fPrompt},
	{[]string{"usage", "output_tokens"}, fCompletion},
	{[]string{"response", "usage", "input_tokens"}, fPrompt},
	{[]string{"response", "usage", "output_tokens"}, fCompletion},
	{[]string{"message", "usage", "input_tokens"}, fPrompt},
	{[]string{"message", "usage", "output_tokens"}, fCompletion},
	{[]string{"id"}, fID},
	{[]string{"response", "id"}, fID},
	{[]string{"message", "id"}, fID},
	{[]string{"usage", "cache_read_input_tokens"}, fCacheRead},
	{[]string{"usage", "cache_creation_input_tokens"}, fCacheCreate},
	{[]string{"message", "usage", "cache_read_input_tokens"}, fCacheRead},
	{[]string{"message", "usage", "cache_creation_input_tokens"}, fCacheCreate},
	{[]string{"usage", "prompt_tokens_details", "cached_tokens"}, fCachedTokens},
	{[]string{"usage", "input_tokens_details", "cached_tokens"}, fCachedTokens},
	{[]string{"response", "usage", "input_tokens_details", "cached_tokens"}, fCachedTokens},
	{[]string{"timings", "cache_n"}, fTimingsCache},
}

const (
	maxLevels  = 4
	maxKey     = 32
	allTargets = uint32(1)<<len(targets) - 1
)

// JSON tokenizer states.
const (
	jValue    = iota // a value may start
	jObjStart        // after '{': a key or '}'
	jKey             // after ',' in an object: a key
	jInKey
	jColon
	jInStr
	jNum
	jLit
	jAfter   // after a value: ',' or a closer
	jSkip    // inside a value skipped whole (s.skip brackets deep)
	jSkipStr // in a string inside it
	jErr     // malformed: ignored until the document ends
)

// skipTable marks the bytes a skipped value's scan stops at.
const skipTable = "" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" + // '"'
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01\x00\x00" + // '[' ']'
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01\x00\x00" + // '{' '}'
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

// json consumes a piece of JSON text.
func (s *Sniffer) json(p []byte) {
	i := 0
	for i < len(p) {
		switch s.js {
		case jValue:
			c := p[i]
			i++
			switch {
			case isSpace(c):
			case (c == '{' && s.depth > 0 && s.deeper == 0) || c == '[':
				// Nothing recognised lies inside (targets pass through no
				// array): skip the value, only matching brackets.
				s.skip = 1
				s.js = jSkip
			case c == '{':
				if !s.push(true) {
					return
				}
				lvl := s.depth - 1
				switch {
				case lvl == 0:
					s.masks[0] = allTargets
				case lvl < maxLevels:
					s.masks[lvl] = s.deeper
				}
				s.leaf, s.deeper = 0, 0
				s.js = jObjStart
			case c == '"':
				s.idCap = s.leaf != 0 && !s.idSet && s.leafField(fID)
				if s.idCap {
					s.idLen = 0
				}
				s.sawEsc = false
				s.js = jInStr
			case c == '-' || (c >= '0' && c <= '9'):
				s.numOK = c != '-' && s.leaf != 0
				s.num = int64(c - '0')
				s.js = jNum
			case c == 't' || c == 'f' || c == 'n':
				s.js = jLit
			default:
				s.js = jErr
			}
		case jObjStart, jKey:
			c := p[i]
			i++
			switch {
			case isSpace(c):
			case c == '"':
				s.klen, s.sawEsc = 0, false
				s.js = jInKey
			case c == '}' && s.js == jObjStart:
				s.pop()
			default:
				s.js = jErr
			}
		case jInKey:
			n, closed := s.scanString(p[i:])
			lvl := s.depth - 1
			if lvl < maxLevels && s.masks[lvl] != 0 {
				seg := p[i : i+n]
				if closed {
					seg = seg[:n-1]
				}
				if s.klen+len(seg) <= maxKey {
					for k, c := range seg {
						s.kbuf[s.klen+k] = c
						if c == '\\' {
							s.sawEsc = true
						}
					}
				}
				s.klen += len(seg)
			}
			i += n
			if closed {
				s.keyDone()
				s.js = jColon
			}
		case jColon:
			c := p[i]
			i++
			switch {
			case isSpace(c):
			case c == ':':
				s.js = jValue
			default:
				s.js = jErr
			}
		case jInStr:
			n, closed := s.scanString(p[i:])
			if s.idCap {
				seg := p[i : i+n]
				if closed {
					seg = seg[:n-1]
				}
				if s.idLen+len(seg) <= MaxID {
					copy(s.id[s.idLen:], seg)
				}
				if bytes.IndexByte(seg, '\\') >= 0 {
					s.sawEsc = true
				}
				s.idLen += len(seg)
			}
			i += n
			if closed {
				if s.idCap && !s.sawEsc && s.idLen <= MaxID && s.idLen > 0 {
					s.idSet = true
				}
				s.idCap = false
				s.valueDone()
			}
		case jNum:
			for i < len(p) {
				c := p[i]
				if c >= '0' && c <= '9' {
					if s.num > 1e15 {
						s.numOK = false
					}
					s.num = s.num*10 + int64(c-'0')
				} else if c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' {
					s.numOK = false
				} else {
					break
				}
				i++
			}
			if i < len(p) {
				s.numDone()
			}
		case jLit:
			for i < len(p) && p[i] >= 'a' && p[i] <= 'z' {
				i++
			}
			if i < len(p) {
				s.valueDone()
			}
		case jAfter:
			c := p[i]
			i++
			switch {
			case isSpace(c):
			case c == ',' && s.depth > 0:
				if s.isObj() {
					s.js = jKey
				} else {
					s.js = jValue
				}
			case c == '}' && s.depth > 0 && s.isObj(), c == ']' && s.depth > 0 && !s.isObj():
				s.pop()
			default:
				s.js = jErr
			}
		case jSkip:
		skip:
			for i < len(p) && skipTable[p[i]] == 0 {
				i++
			}
			if i == len(p) {
				return
			}
			c := p[i]
			i++
			switch c {
			case '"':
				n, closed := s.scanString(p[i:])
				i += n
				if !closed {
					s.js = jSkipStr
					return
				}
				goto skip
			case '{', '[':
				if s.skip++; s.skip > MaxDepth {
					s.js = jErr
					return
				}
				goto skip
			case '}', ']':
				if s.skip--; s.skip == 0 {
					s.valueDone()
				} else {
					goto skip
				}
			}
		case jSkipStr:
			n, closed := s.scanString(p[i:])
			i += n
			if closed {
				s.js = jSkip
			}
		case jErr:
			return
		}
	}
}

// space is a separator outside the JSON text (a data line's end, the
// body's end): it completes a number or literal in progress.
func (s *Sniffer) space() {
	switch s.js {
	case jNum:
		s.numDone()
	case jLit:
		s.valueDone()
	}
}

// scanString finds the end of a string's content: n bytes of p belong to
// it, the closing quote included when closed. Only a quote preceded by an
// even run of backslashes closes it, so escapes cost nothing but the
// search for the next quote.
func (s *Sniffer) scanString(p []byte) (n int, closed bool) {
	i := 0
	if s.esc {
		if len(p) == 0 {
			return 0, false
		}
		s.esc = false
		i = 1
	}
	// Keys and most values are short: a plain loop finds their end
	// before a vectorised search would have started.
	for end := min(len(p), i+16); i < end; i++ {
		switch p[i] {
		case '"':
			return i + 1, true
		case '\\':
			i++
			if i == len(p) {
				s.esc = true
				return len(p), false
			}
		}
	}
	for {
		q := bytes.IndexByte(p[i:], '"')
		if q < 0 {
			k := len(p)
			for k > i && p[k-1] == '\\' {
				k--
			}
			s.esc = (len(p)-k)%2 == 1
			return len(p), false
		}
		j := i + q
		k := j
		for k > i && p[k-1] == '\\' {
			k--
		}
		if (j-k)%2 == 0 {
			return j + 1, true
		}
		i = j + 1
	}
}

func (s *Sniffer) push(obj bool) bool {
	if s.depth == MaxDepth {
		s.js = jErr
		return false
	}
	w, bit := s.depth/64, uint64(1)<<(s.depth%64)
	if obj {
		s.kinds[w] |= bit
	} else {
		s.kinds[w] &^= bit
	}
	s.depth++
	return true
}

func (s *Sniffer) isObj() bool {
	d := s.depth - 1
	return s.kinds[d/64]&(uint64(1)<<(d%64)) != 0
}

func (s *Sniffer) pop() {
	s.depth--
	s.valueDone()
}

func (s *Sniffer) valueDone() {
	s.leaf, s.deeper = 0, 0
	if s.depth == 0 {
		s.js = jValue // the next top-level value, if any
		return
	}
	s.js = jAfter
}

// keyDone decides which targets the key leads to.
func (s *Sniffer) keyDone() {
	s.leaf, s.deeper = 0, 0
	lvl := s.depth - 1
	if lvl >= maxLevels || s.masks[lvl] == 0 || s.sawEsc || s.klen > maxKey {
		return
	}
	m := keyTargets(lvl, s.kbuf[:s.klen]) & s.masks[lvl]
	s.leaf = m & endsAt[lvl]
	s.deeper = m &^ s.leaf
}

// keyTargets is the set of targets whose path has key at level lvl: the
// targets table compiled into switches (a test keeps them in step).
func keyTargets(lvl int, key []byte) uint32 {
	switch lvl {
	case 0:
		switch string(key) {
		case "usage":
			return 1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<11 | 1<<12 | 1<<15 | 1<<16
		case "response":
			return 1<<4 | 1<<5 | 1<<9 | 1<<17
		case "message":
			return 1<<6 | 1<<7 | 1<<10 | 1<<13 | 1<<14
		case "id":
			return 1 << 8
		case "timings":
			return 1 << 18
		}
	case 1:
		switch string(key) {
		case "prompt_tokens":
			return 1 << 0
		case "completion_tokens":
			return 1 << 1
		case "input_tokens":
			return 1 << 2
		case "output_tokens":
			return 1 << 3
		case "cache_read_input_tokens":
			return 1 << 11
		case "cache_creation_input_tokens":
			return 1 << 12
		case "usage":
			return 1<<4 | 1<<5 | 1<<6 | 1<<7 | 1<<13 | 1<<14 | 1<<17
		case "id":
			return 1<<9 | 1<<10
		case "prompt_tokens_details":
			return 1 << 15
		case "input_tokens_details":
			return 1 << 16
		case "cache_n":
			return 1 << 18
		}
	case 2:
		switch string(key) {
		case "input_tokens":
			return 1<<4 | 1<<6
		case "output_tokens":
			return 1<<5 | 1<<7
		case "cache_read_input_tokens":
			return 1 << 13
		case "cache_creation_input_tokens":
			return 1 << 14
		case "cached_tokens":
			return 1<<15 | 1<<16
		case "input_tokens_details":
			return 1 << 17
		}
	case 3:
		if string(key) == "cached_tokens" {
			return 1 << 17
		}
	}
	return 0
}

// endsAt are the targets whose path ends at each level.
var endsAt = [maxLevels]uint32{
	1 << 8,
	1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<9 | 1<<10 | 1<<11 | 1<<12 | 1<<18,
	1<<4 | 1<<5 | 1<<6 | 1<<7 | 1<<13 | 1<<14 | 1<<15 | 1<<16,
	1 << 17,
}

func (s *Sniffer) leafField(f int) bool {
	for m := s.leaf; m != 0; m &= m - 1 {
		if targets[trailingZeros(m)].field == f {
			return true
		}
	}
	return false
}

func (s *Sniffer) numDone() {
	if s.numOK {
		for m := s.leaf; m != 0; m &= m - 1 {
			switch targets[trailingZeros(m)].field {
			case fPrompt:
				s.prompt, s.hasPrompt = s.num, true
			case fCompletion:
				s.completion, s.hasCompletion = s.num, true
			case fCacheRead:
				s.cacheRead, s.hasPrompt, s.hasCacheRead = s.num, true, true
			case fCachedTokens:
				s.cachedTokens, s.hasCachedTokens = s.num, true
			case fTimingsCache:
				s.timingsCache, s.hasTimingsCache = s.num, true
			case fCacheCreate:
				s.cacheCreate, s.hasPrompt = s.num, true
			}
		}
	}
	s.valueDone()
}

func trailingZeros(m uint32) int { return bits.TrailingZeros32(m) }
