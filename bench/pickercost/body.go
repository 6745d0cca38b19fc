package pickercost

import (
	"fmt"
	"unicode/utf8"
)

// corpus is prose already escaped for a JSON string: message contents
// are slices of it, copied into bodies without encoding, so building a
// 512 KB body costs a copy and the phase being measured is not slowed by
// the bench making its bodies. It has escapes (\" \n \t) and non-ASCII
// letters so that kvca's canonicalisation does real work.
type corpus struct{ text []byte }

var vocabulary = []string{
	"the", "cache", "prefix", "token", "block", "request", "server", "model",
	"route", "latency", "answer", "question", "system", "user", "assistant",
	"prompt", "context", "window", "memory", "throughput", "of", "and", "to",
	"a", "in", "is", "for", "with", "that", "on", "KV", "attention", "layer",
	"batch", "decode", "prefill", "engine", "proxy", "hash", "chain",
	`\"quoted\"`, `line\nbreak`, `tab\tstop`, "café", "naïve", "12", "3.5", "—",
}

// rng is a fixed linear congruential generator: the same bodies on every
// run and machine, so runs are comparable.
type rng uint64

func (r *rng) next() uint64 {
	*r = *r*6364136223846793005 + 1442695040888963407
	return uint64(*r >> 33)
}

func newCorpus(n int) *corpus {
	r := rng(0x6b766361)
	b := make([]byte, 0, n+32)
	for len(b) < n {
		w := vocabulary[r.next()%uint64(len(vocabulary))]
		b = append(b, w...)
		switch r.next() % 16 {
		case 0:
			b = append(b, ". "...)
		case 1:
			b = append(b, ", "...)
		default:
			b = append(b, ' ')
		}
	}
	return &corpus{text: b}
}

// piece returns about n bytes of the corpus at an offset drawn from seed,
// cut so that it stays valid JSON string content: it neither ends inside
// a UTF-8 sequence nor on the backslash of an escape (the vocabulary has
// no escaped backslash, so a lone trailing backslash is always one).
func (c *corpus) piece(seed uint64, n int) []byte {
	n = max(n, 1)
	if n >= len(c.text) {
		n = len(c.text) - 8
	}
	r := rng(seed*0x9e3779b97f4a7c15 + 1)
	start := int(r.next() % uint64(len(c.text)-n))
	for start > 0 && !utf8.RuneStart(c.text[start]) {
		start--
	}
	// Start after a backslash would turn `\n` into a bare "n": harmless,
	// but starting on a word is more like a message.
	for start > 0 && c.text[start-1] != ' ' {
		start--
	}
	end := start + n
	for end > start+1 && !utf8.RuneStart(c.text[end]) {
		end--
	}
	if c.text[end-1] == '\\' {
		end--
	}
	return c.text[start:end]
}

// Shape of the conversations the bench sends: a system prompt shared by
// many conversations (as a fleet's applications share theirs), a first
// user message that brings the body to 85% of the nominal size, then
// follow-ups that resend the history plus an answer and a new question,
// 15% of the size each. Over three turns the mean body is the nominal
// size; the follow-ups extend a prefix kvca has seen, which is what its
// routing is for.
const (
	turns         = 3
	systemPrompts = 4
	growPercent   = 15
)

// conversation builds the bodies of one conversation's turns, each
// re-sending the whole history as clients do. id makes it distinct from
// every other; phase keeps the phases of a run apart, so that one mode
// does not find what another left in kvca's tables and memo.
func (c *corpus) conversation(size int, phase, id uint64, stream bool) [][]byte {
	grow := max(size*growPercent/100, 64)
	first := max(size-grow*(turns-1)/2, 256)
	sysLen := min(max(size/4, 200), 8<<10)
	sys := c.piece(uint64(id%systemPrompts)+1, sysLen)

	head := []byte(`{"model":"mock","max_tokens":8,"temperature":0.7,`)
	if stream {
		head = append(head, `"stream":true,"stream_options":{"include_usage":true},`...)
	} else {
		head = append(head, `"stream":false,`...)
	}
	head = append(head, `"messages":[`...)
	msgs := appendMessage(nil, "system", sys)
	seed := phase<<40 | id<<8
	// The first user message fills the body to its size; 90 bytes is
	// about what the JSON around the messages takes.
	msgs = append(msgs, ',')
	msgs = appendMessage(msgs, "user", c.piece(seed, first-len(head)-len(msgs)-90))
	out := make([][]byte, 0, turns)
	body := func() []byte {
		b := make([]byte, 0, len(head)+len(msgs)+2)
		return append(append(append(b, head...), msgs...), "]}"...)
	}
	out = append(out, body())
	for t := uint64(1); t < turns; t++ {
		answer := c.piece(seed+2*t, grow/4)
		msgs = append(msgs, ',')
		msgs = appendMessage(msgs, "assistant", answer)
		msgs = append(msgs, ',')
		msgs = appendMessage(msgs, "user", c.piece(seed+2*t+1, grow-len(answer)-70))
		out = append(out, body())
	}
	return out
}

func appendMessage(b []byte, role string, content []byte) []byte {
	b = fmt.Appendf(b, `{"role":%q,"content":"`, role)
	b = append(b, content...)
	return append(b, `"}`...)
}

// meanLen is the mean length of bodies, for the progress line.
func meanLen(bodies [][]byte) int {
	if len(bodies) == 0 {
		return 0
	}
	n := 0
	for _, b := range bodies {
		n += len(b)
	}
	return n / len(bodies)
}
