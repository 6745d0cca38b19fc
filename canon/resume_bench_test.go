package canon_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
)

// agentBody returns the messages of a chat history of about size bytes and
// the body around them, in the key order encoding/json gives a map (so the
// header's model, stream and temperature come after the messages).
func agentMessages(size int, seed int) []map[string]any {
	var msgs []map[string]any
	msgs = append(msgs, map[string]any{"role": "system", "content": benchText(seed, min(size/4, 2000))})
	total := 0
	for i := 1; total < size; i++ {
		role := "user"
		if i%2 == 0 {
			role = "assistant"
		}
		n := min(1500, size-total)
		msgs = append(msgs, map[string]any{"role": role, "content": benchText(seed*1000+i, n)})
		total += n + 40
	}
	return msgs
}

func benchText(seed, n int) string {
	const words = "the quick brown fox jumps over a lazy dog while \"quoted\" routers learn prefix caches, tabs\tand newlines\nappear; "
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(strconv.Itoa(seed*131 + i))
		b.WriteByte(' ')
		b.WriteString(words)
	}
	return b.String()[:n]
}

func agentBody(msgs []map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"model": "bench-model", "messages": msgs, "temperature": 0.7, "stream": true, "max_tokens": 256})
	return b
}

// followup is the history body plus an assistant turn and a user turn of
// about newBytes together; the 8 bytes at stamp (in the new part) may be
// overwritten to make each iteration's follow-up new.
func followup(hist []map[string]any, newBytes int) (body []byte, stamp int) {
	msgs := append(append([]map[string]any(nil), hist...),
		map[string]any{"role": "assistant", "content": "@@@@@@@@" + benchText(7, newBytes/2-8)},
		map[string]any{"role": "user", "content": benchText(8, newBytes/2)})
	body = agentBody(msgs)
	return body, strings.Index(string(body), "@@@@@@@@")
}

var historySizes = []int{16 << 10, 128 << 10, 512 << 10, 1 << 20}

func servedCanon(r *canon.Resumer) (*canon.Canonicalizer, *chain.Hasher) {
	c := canon.NewWithOptions(nil, canon.Options{NoSession: true})
	c.UseResumer(r)
	h := chain.NewHasher(chain.RandomKey(), 256)
	h.UseMemo(chain.NewMemo(64 << 20))
	return c, h
}

func stampBody(body []byte, at int, i uint64) {
	for k := 0; k < 8; k++ {
		body[at+k] = 'a' + byte(i>>(4*k)&15)
	}
}

// BenchmarkResumeFollowup: canon+chain of an agent's next turn, 4 KB of
// new messages after a history the Resumer has seen, as kvca serve runs
// (no session hash, the CBR memo on). Each iteration's new part differs,
// so each is a first sight of the follow-up.
// stamping returns a step that stamps body at at with the next number
// (stampBody) and canonicalises it.
func stamping(b *testing.B, c *canon.Canonicalizer, h *chain.Hasher, body []byte, at int) func() {
	var info canon.Info
	var i uint64
	return func() {
		i++
		stampBody(body, at, i)
		h.Reset()
		if err := c.Canonicalize(canon.Chat, body, h, &info); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkResumeFollowup(b *testing.B) {
	for _, n := range historySizes {
		b.Run(fmt.Sprintf("history%dKB", n>>10), func(b *testing.B) {
			hist := agentMessages(n, 1)
			c, h := servedCanon(canon.NewResumer(benchBudget))
			var info canon.Info
			h.Reset()
			if err := c.Canonicalize(canon.Chat, agentBody(hist), h, &info); err != nil {
				b.Fatal(err)
			}
			body, at := followup(hist, 4<<10)
			next := stamping(b, c, h, body, at)
			warm(c, next)
			hits := c.ResumeStats().Hits
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				next()
				n++
			}
			if st := c.ResumeStats(); st.Hits < hits+uint64(n) {
				b.Fatalf("resumed %d of %d", st.Hits-hits, n)
			}
		})
	}
}

// BenchmarkResumeCold: first sight of bodies of the follow-ups' sizes (and
// a 4 KB body), with and without a Resumer: what remembering costs a body
// that nothing resumes. Each iteration's body differs in its first
// message.
func BenchmarkResumeCold(b *testing.B) {
	for _, n := range append([]int{4 << 10}, historySizes...) {
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("%dKB/resumer=%v", n>>10, on), func(b *testing.B) {
				var r *canon.Resumer
				if on {
					// Room for a few dozen bodies: a budget that holds only
					// a handful of 1 MB bodies recycles none of their buffers.
					r = canon.NewResumer(max(benchBudget, 32*n))
				}
				c, h := servedCanon(r)
				hist := agentMessages(n, 2)
				hist[0]["content"] = "@@@@@@@@" + hist[0]["content"].(string)
				body := agentBody(hist)
				at := strings.Index(string(body), "@@@@@@@@")
				next := stamping(b, c, h, body, at)
				warm(c, next)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					next()
				}
			})
		}
	}
}

// warm runs next until c's Resumer (if any) has filled its budget and
// then as many times again, so that the benchmark measures the steady
// state, where recording reuses what eviction frees, and not the
// Resumer's first fill.
func warm(c *canon.Canonicalizer, next func()) {
	if !c.Resuming() {
		next()
		return
	}
	n := 0
	for c.ResumeStats().Evictions == 0 {
		next()
		n++
	}
	for range n {
		next()
	}
}

// benchBudget is the Resumer's memory in the benchmarks: small enough that
// they soon reach eviction's steady state, where new bodies reuse the
// buffers of dropped ones (before it, the first touch of fresh heap pages
// costs more than the copy into them).
const benchBudget = 8 << 20

// BenchmarkResumeManyConversations: the follow-ups of many conversations
// that share a system prompt and part after it, each user turn opening
// with its own word, as a fleet's traffic does: the node where they part
// has a kid per first byte, and every lookup passes it.
func BenchmarkResumeManyConversations(b *testing.B) {
	const convs = 1024
	const openers = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	system := map[string]any{"role": "system", "content": benchText(1, 1000)}
	c, h := servedCanon(canon.NewResumer(benchBudget))
	var info canon.Info
	bodies := make([][]byte, convs)
	stamps := make([]int, convs)
	for i := range bodies {
		first := map[string]any{"role": "user", "content": string(openers[i%len(openers)]) + benchText(i+2, 300)}
		h.Reset()
		if err := c.Canonicalize(canon.Chat, agentBody([]map[string]any{system, first}), h, &info); err != nil {
			b.Fatal(err)
		}
		bodies[i], stamps[i] = followup([]map[string]any{system, first}, 256)
	}
	var n uint64
	b.ReportAllocs()
	for b.Loop() {
		n++
		i := int(n % convs)
		stampBody(bodies[i], stamps[i], n)
		h.Reset()
		if err := c.Canonicalize(canon.Chat, bodies[i], h, &info); err != nil {
			b.Fatal(err)
		}
	}
}
