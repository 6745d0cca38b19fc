package canon_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kvca/kvca/canon"
)

// gen builds request bodies the way clients vary them: key order, spacing,
// escapes, duplicate keys, content blocks, header fields before and after
// the prompt array, and conversations that grow, fork and change their
// controls between turns.
type gen struct {
	r   *rand.Rand
	api canon.API
	ws  bool // spaces and newlines between tokens
}

func (g *gen) sp() string {
	if !g.ws || g.r.IntN(3) > 0 {
		return ""
	}
	return [...]string{" ", "\n", "\t ", "\r\n  "}[g.r.IntN(4)]
}

// text is a string literal: plain, escaped the canonical way or not, long
// enough at times to reach the memo (256 bytes) and the snapshots.
func (g *gen) text() string {
	n := g.r.IntN(40)
	if g.r.IntN(4) == 0 {
		n = 200 + g.r.IntN(3000)
	}
	var b strings.Builder
	b.WriteByte('"')
	for b.Len() < n {
		switch g.r.IntN(30) {
		case 0:
			b.WriteString(`\"`)
		case 1:
			b.WriteString(`\n`)
		case 2:
			b.WriteString(`\u00e9`)
		case 3:
			b.WriteString(`\/`)
		case 4:
			b.WriteString("é")
		case 5:
			b.WriteString(`\\`)
		default:
			b.WriteString("word ")
		}
	}
	b.WriteByte('"')
	return b.String()
}

func (g *gen) obj(members ...string) string {
	if g.r.IntN(2) == 0 {
		g.r.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	}
	var b strings.Builder
	b.WriteString("{" + g.sp())
	for i, m := range members {
		if i > 0 {
			b.WriteString(g.sp() + "," + g.sp())
		}
		b.WriteString(m)
	}
	b.WriteString(g.sp() + "}")
	return b.String()
}

func (g *gen) kv(k, v string) string { return `"` + k + `"` + g.sp() + ":" + g.sp() + v }

var roles = []string{"user", "assistant", "system", "tool", "user", "assistant"}

func (g *gen) message() string {
	role := roles[g.r.IntN(len(roles))]
	ms := []string{g.kv("role", `"`+role+`"`)}
	switch g.r.IntN(5) {
	case 0:
		block := g.obj(g.kv("type", `"text"`), g.kv("text", g.text()), g.kv("cache_control", `{"type":"ephemeral"}`))
		ms = append(ms, g.kv("content", "["+g.sp()+block+g.sp()+"]"))
	case 1:
		ms = append(ms, g.kv("content", `[{"type":"tool_result","tool_use_id":"t1","content":`+g.text()+`}]`))
	case 2:
		ms = append(ms, g.kv("content", g.text()), g.kv("name", `"x"`), g.kv("n", fmt.Sprint(g.r.IntN(100))+".0"))
	default:
		ms = append(ms, g.kv("content", g.text()))
	}
	if g.r.IntN(20) == 0 {
		ms = append(ms, g.kv("role", `"assistant"`)) // a duplicate: the last wins
	}
	if g.api == canon.Responses && g.r.IntN(3) == 0 {
		ms = append(ms, g.kv("type", `"function_call_output"`))
	}
	return g.obj(ms...)
}

// conversation is one client's state: its header members and messages.
type conversation struct {
	before, after []string // top-level members before and after the prompt
	msgs          []string
	seed          uint64 // of the spacing between them: a client's serialiser is deterministic
}

func (g *gen) header() (before, after []string) {
	pool := []string{
		g.kv("model", `"m`+fmt.Sprint(g.r.IntN(3))+`"`),
		g.kv("stream", "true"),
		g.kv("max_tokens", fmt.Sprint(1+g.r.IntN(4096))),
		g.kv("tools", `[{"name":"t","description":`+g.text()+`}]`),
		g.kv("temperature", "0.5"),
		g.kv("user", `"alice"`),
		g.kv("prompt_cache_key", `"k`+fmt.Sprint(g.r.IntN(3))+`"`),
		g.kv("priority", "-1"),
		g.kv("metadata", `{"user_id":"u1"}`),
		g.kv("system", g.text()),
		g.kv("previous_response_id", `"resp_1"`),
		g.kv("safety_identifier", `"s"`),
	}
	g.r.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	n := g.r.IntN(len(pool))
	cut := g.r.IntN(n + 1)
	return pool[:cut], pool[cut:n]
}

func (g0 *gen) body(c *conversation) []byte {
	g := &gen{r: rand.New(rand.NewPCG(c.seed, 1)), api: g0.api, ws: g0.ws}
	key := g.api
	name := "messages"
	if key == canon.Responses {
		name = "input"
	}
	var b strings.Builder
	b.WriteString(g.sp() + "{" + g.sp())
	for _, m := range c.before {
		b.WriteString(m + g.sp() + "," + g.sp())
	}
	b.WriteString(`"` + name + `"` + g.sp() + ":" + g.sp() + "[" + g.sp())
	for i, m := range c.msgs {
		if i > 0 {
			b.WriteString(g.sp() + "," + g.sp())
		}
		b.WriteString(m)
	}
	g.r = rand.New(rand.NewPCG(c.seed, 2)) // the same spacing after the array on every turn
	b.WriteString(g.sp() + "]")
	for _, m := range c.after {
		b.WriteString(g.sp() + "," + g.sp() + m)
	}
	b.WriteString(g.sp() + "}" + g.sp())
	return []byte(b.String())
}

// step changes c as a client's next request would: mostly new messages,
// sometimes a fork (a turn retried or edited), a control changed, or a
// body broken at its end.
func (g *gen) step(c *conversation) (broken bool) {
	switch k := g.r.IntN(20); {
	case k < 12 || len(c.msgs) == 0:
		for n := 1 + g.r.IntN(3); n > 0; n-- {
			c.msgs = append(c.msgs, g.message())
		}
	case k < 15:
		i := g.r.IntN(len(c.msgs))
		c.msgs = append(c.msgs[:i:i], g.message())
	case k < 17:
		c.before, c.after = g.header()
	case k < 18:
		return true
	default:
		// The same body again.
	}
	return false
}

// runDifferential plays conversations through a resuming and a cold
// Canonicalizer and compares every outcome.
func runDifferential(t *testing.T, seed uint64, rounds int, budget int) (hits, misses uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for _, api := range []canon.API{canon.Chat, canon.Messages, canon.Responses} {
		for _, opts := range []canon.Options{{}, {NoSession: true}} {
			p := newPair(opts, budget, 8*(1+r.IntN(8)))
			canon.SetSnapEvery(p.r, []int{0, 64, 2048}[r.IntN(3)])
			g := &gen{r: r, api: api, ws: r.IntN(2) == 0}
			convs := make([]*conversation, 1+r.IntN(4))
			for i := range convs {
				convs[i] = &conversation{seed: r.Uint64()}
				convs[i].before, convs[i].after = g.header()
				if i > 0 && r.IntN(2) == 0 {
					// Shares a start with the first conversation.
					convs[i].before, convs[i].after = convs[0].before, convs[0].after
					convs[i].msgs = append([]string(nil), convs[0].msgs...)
				}
			}
			for range rounds {
				c := convs[r.IntN(len(convs))]
				broken := g.step(c)
				body := g.body(c)
				if broken {
					body = body[:len(body)-1-r.IntN(min(len(body)-1, 30))]
				}
				p.check(t, api, body)
				if err := canon.CheckResumer(p.r); err != nil {
					t.Fatal(err)
				}
			}
			st := p.r.Stats()
			if st.Bytes > budget {
				t.Fatalf("holds %d bytes, budget %d", st.Bytes, budget)
			}
			hits, misses = hits+st.Hits, misses+st.Misses
		}
	}
	return hits, misses
}

func TestResumeDifferential(t *testing.T) {
	t.Parallel()
	n := 300
	if testing.Short() {
		n = 60
	}
	var hits, misses uint64
	for seed := range uint64(8) {
		h, m := runDifferential(t, seed, n, 64<<20)
		hits, misses = hits+h, misses+m
		runDifferential(t, seed+100, n, 64<<10) // evicting all the time
	}
	// Most requests continue a known body: the resumed path must be the
	// one under test.
	if hits < misses {
		t.Fatalf("resumed %d requests, %d cold", hits, misses)
	}
	t.Logf("resumed %d requests, %d cold", hits, misses)
}

func FuzzResume(f *testing.F) {
	for s := range uint64(4) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed uint64) { runDifferential(t, seed, 40, 32<<10) })
}
