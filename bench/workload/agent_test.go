package workload

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/kvca/kvca/bench/mock"
)

// smallAgent is an Agent of CI size: the same shape as the defaults,
// prompts of tens of kilobytes instead of up to a megabyte.
func smallAgent(seed uint64) Agent {
	return Agent{Seed: seed, Kinds: 2, Sessions: 8, MinTurns: 8, MaxTurns: 16,
		PrefixBytes: 4000, MinBytes: 40_000, MaxBytes: 80_000, OutputTokens: 16}
}

func TestAgentDeterministic(t *testing.T) {
	a, b := smallAgent(7).Generate(), smallAgent(7).Generate()
	if len(a.Requests) != len(b.Requests) || len(a.Requests) == 0 {
		t.Fatal(len(a.Requests), len(b.Requests))
	}
	for i := range a.Requests {
		x, y := a.Requests[i], b.Requests[i]
		if x.At != y.At || x.Session != y.Session || x.Turn != y.Turn || !bytes.Equal(x.Body, y.Body) {
			t.Fatalf("request %d differs", i)
		}
	}
	if c := smallAgent(8).Generate(); bytes.Equal(c.Requests[0].Body, a.Requests[0].Body) && c.Requests[0].At == a.Requests[0].At {
		t.Fatal("another seed gives the same workload")
	}
}

// agentThreads checks the links generate returns and says, per request,
// whether it is the main agent's (not a sub-agent's).
func agentThreads(t *testing.T, w *Workload, prev []int, fork []bool) []bool {
	t.Helper()
	main := make([]bool, len(w.Requests))
	for i, r := range w.Requests {
		p := prev[i]
		switch {
		case p < 0:
			if fork[i] || r.Turn != 0 {
				t.Fatalf("request %d: a first request forks or has turn %d", i, r.Turn)
			}
			main[i] = true
		case p >= i || w.Requests[p].At > r.At || w.Requests[p].Session != r.Session:
			t.Fatalf("request %d extends request %d", i, p)
		default:
			main[i] = main[p] && !fork[i]
		}
	}
	return main
}

// subAgentHeads gives, per request, the first request of the sub-agent it
// belongs to, -1 for the main agent's.
func subAgentHeads(w *Workload, prev []int, fork []bool) []int {
	head := make([]int, len(w.Requests))
	for i := range head {
		switch {
		case fork[i]:
			head[i] = i
		case prev[i] < 0:
			head[i] = -1
		default:
			head[i] = head[prev[i]]
		}
	}
	return head
}

// messagesEnd is where the messages array of a chatBody ends: its bytes
// before it are the request's whole conversation.
func messagesEnd(t *testing.T, body []byte) int {
	t.Helper()
	i := bytes.LastIndex(body, []byte(`],"max_tokens":`))
	if i < 0 {
		t.Fatalf("no messages end in %.200s", body)
	}
	return i
}

// Every request extends the one before it in its thread: its messages
// begin with all of that request's messages, byte for byte, and its
// prompt with that request's prompt (a sub-agent's first request, with
// that prompt up to its generation prompt, where the sub-task begins).
func TestAgentPrefixes(t *testing.T) {
	w, prev, fork := smallAgent(3).generate()
	main := agentThreads(t, w, prev, fork)
	head := subAgentHeads(w, prev, fork)
	siblings := map[int][]int{}
	calls, results := 0, 0
	prompts := make([][]byte, len(w.Requests))
	for i, r := range w.Requests {
		prompts[i] = render(t, r)
		if !json.Valid(r.Body) || r.Path != mock.PathChat || r.Prefix == 0 || r.PrefixTokens <= 0 {
			t.Fatalf("request %d: %+v", i, r)
		}
		calls += bytes.Count(r.Body, []byte(`"tool_calls":`))
		results += bytes.Count(r.Body, []byte(`{"role":"tool","content":"`))
		p := prev[i]
		if p < 0 {
			continue
		}
		pb, b := w.Requests[p].Body, r.Body
		if pm := messagesEnd(t, pb); !bytes.HasPrefix(b, pb[:pm]) || messagesEnd(t, b) <= pm {
			t.Fatalf("request %d does not extend request %d's messages", i, p)
		}
		pp, rp := prompts[p], prompts[i]
		if fork[i] {
			siblings[p] = append(siblings[p], i)
			pp = pp[:len(pp)-genPromptLen]
		}
		if !bytes.HasPrefix(rp, pp) || len(rp) <= len(pp) {
			t.Fatalf("request %d's prompt does not extend request %d's", i, p)
		}
		if r.Prefix != w.Requests[p].Prefix {
			t.Fatalf("request %d changes agent", i)
		}
	}
	if calls == 0 || results == 0 {
		t.Fatal("no tool calls")
	}
	if len(siblings) != 2*8 {
		t.Fatalf("%d fan-outs, want 2 a session", len(siblings))
	}
	for p, sib := range siblings {
		if !main[p] || len(sib) < 2 || len(sib) > 4 {
			t.Fatalf("fan-out of request %d: %d sub-agents", p, len(sib))
		}
		for _, s := range sib {
			if w.Requests[s].At != w.Requests[sib[0]].At || w.Requests[s].At < w.Requests[p].At {
				t.Fatalf("fan-out of request %d not at one instant after it", p)
			}
		}
		// The main agent's next request carries one result per sub-agent,
		// after the last sub-agent request.
		next := -1
		for i := p + 1; i < len(w.Requests); i++ {
			if prev[i] == p && !fork[i] {
				next = i
			}
		}
		if next < 0 {
			t.Fatalf("request %d has no next main turn", p)
		}
		for i := range w.Requests {
			if h := head[i]; h >= 0 && prev[h] == p && w.Requests[i].At > w.Requests[next].At {
				t.Fatalf("sub-agent request %d after the main agent's next request %d", i, next)
			}
		}
		added := w.Requests[next].Body[messagesEnd(t, w.Requests[p].Body):]
		if n := bytes.Count(added, []byte(`{"role":"tool","content":"Report: `)); n != len(sib) {
			t.Fatalf("request %d carries %d reports for %d sub-agents", next, n, len(sib))
		}
	}
}

// The default sizes: a first request of about the prefix's 20 KB, a last
// main-agent request of 0.5 to 1 MB, 20 to 60 main-agent requests, and
// sub-agents of 2 to 4 requests.
func TestAgentSizes(t *testing.T) {
	a := Agent{Seed: 1, Sessions: 2}
	w, prev, fork := a.generate()
	a.defaults()
	main := agentThreads(t, w, prev, fork)
	head := subAgentHeads(w, prev, fork)
	turns := map[int]int{}
	last := map[int]int{}
	subLen := map[int]int{} // sub-agent's first request → its requests
	for i, r := range w.Requests {
		n := len(r.Body)
		if r.Turn == 0 && (n < a.PrefixBytes || n > a.PrefixBytes+1500) {
			t.Fatalf("first request of session %d: %d bytes", r.Session, n)
		}
		if main[i] {
			turns[r.Session]++
			last[r.Session] = n
			continue
		}
		subLen[head[i]]++
	}
	for sess, n := range turns {
		if n < a.MinTurns || n > a.MaxTurns {
			t.Errorf("session %d: %d main-agent requests", sess, n)
		}
		if b := last[sess]; b < a.MinBytes || b > a.MaxBytes+a.MaxBytes/50 {
			t.Errorf("session %d: last request %d bytes", sess, b)
		}
		t.Logf("session %d: %d main-agent requests, last %d bytes", sess, n, last[sess])
	}
	for h, n := range subLen {
		if n < 2 || n > a.SubAgentTurns {
			t.Errorf("sub-agent from request %d: %d requests", h, n)
		}
	}
	if len(turns) != 2 || len(subLen) < 2*2*2 {
		t.Fatal(len(turns), len(subLen))
	}
}

// Nearly all of every prompt repeats an earlier one: the ideal hit rate
// is high, and sessions of one agent share its prefix.
func TestAgentIdeal(t *testing.T) {
	w := smallAgent(5).Generate()
	h, err := Ideal(w.Requests, 16)
	if err != nil {
		t.Fatal(err)
	}
	if h.Rate() < 0.85 {
		t.Fatalf("ideal hit rate %.3f", h.Rate())
	}
	t.Logf("%d requests, ideal hit rate %.3f", len(w.Requests), h.Rate())
	// First requests of one agent share its prefix and the opening of the
	// user's message ("\n<|user|>\nTask: "), and no more but by chance.
	byAgent := map[int][]Request{}
	for _, r := range w.Requests {
		if r.Turn == 0 {
			byAgent[r.Prefix] = append(byAgent[r.Prefix], r)
		}
	}
	if len(byAgent) != 2 {
		t.Fatal(len(byAgent))
	}
	for k, rs := range byAgent {
		first := render(t, rs[0])
		for _, r := range rs[1:] {
			p := render(t, r)
			n := 0
			for n < len(p) && n < len(first) && p[n] == first[n] {
				n++
			}
			if pre := r.PrefixTokens * mock.BytesPerToken; r.PrefixTokens != rs[0].PrefixTokens || n < pre || n > pre+40 {
				t.Fatalf("agent %d: first requests share %d bytes, prefix %d tokens", k, n, r.PrefixTokens)
			}
		}
	}
}
