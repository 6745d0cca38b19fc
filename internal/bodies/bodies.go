// Package bodies builds realistic OpenAI chat request bodies of a given
// size for benchmarks and tests, deterministically.
package bodies

import (
	"encoding/json"
	"fmt"
	"strings"
)

// words is prose-like filler: mixed lengths, punctuation and a few escapes,
// so canonicalisation does real work.
const words = "the quick brown fox jumps over a lazy dog while \"quoted\" routers learn " +
	"prefix caches, tabs\tand newlines\nappear; café naïve 😀 numbers 12 3.5 "

func filler(seed, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%d ", seed*131+i)
		b.WriteString(words)
	}
	return b.String()[:n]
}

// Chat returns a chat body of about size bytes: a system prompt, then user
// and assistant turns, the last a user turn.
func Chat(size int) []byte {
	msgs := []map[string]any{{"role": "system", "content": filler(0, min(size/4, 2000))}}
	body := func() []byte {
		b, _ := json.Marshal(map[string]any{"model": "bench-model", "messages": msgs, "temperature": 0.7, "stream": true, "max_tokens": 256})
		return b
	}
	for turn := 1; ; turn++ {
		cur := len(body())
		if cur >= size {
			return body()
		}
		role := "user"
		if turn%2 == 0 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": filler(turn, min(size-cur, 1500))})
	}
}

// Conversation returns the bodies of turns 1..turns of one conversation,
// each re-sending the whole history as clients do.
func Conversation(turns, turnBytes int) [][]byte {
	msgs := []map[string]any{{"role": "system", "content": filler(0, 1200)}}
	var out [][]byte
	for t := 0; t < turns; t++ {
		msgs = append(msgs, map[string]any{"role": "user", "content": filler(2*t+1, turnBytes)})
		b, _ := json.Marshal(map[string]any{"model": "bench-model", "messages": msgs, "stream": true})
		out = append(out, b)
		msgs = append(msgs, map[string]any{"role": "assistant", "content": filler(2*t+2, turnBytes)})
	}
	return out
}
