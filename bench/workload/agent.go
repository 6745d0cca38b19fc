package workload

import (
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"

	"github.com/kvca/kvca/bench/mock"
)

// Agent is coding agents' sessions sent as chat, each request long and
// almost entirely the previous one: every session belongs to one of Kinds
// agents, whose sessions all start with its system prompt and tool
// definitions (PrefixBytes together), then a task. Each later request
// resends everything and appends the assistant's tool call and the tool's
// result, so that prompts grow from about PrefixBytes to a size drawn per
// session between MinBytes and MaxBytes by its last turn. Between two
// requests of a session pass the model's step (ThinkTime) and the tool's
// run (ToolTime, longer and more variable).
//
// At Fanouts of its turns a session fans out 2 to MaxSubAgents sub-agents
// at one instant: each resends the session's whole prompt of that turn
// with a sub-task of its own appended, and runs 2 to SubAgentTurns
// requests of its own, growing as the main agent does; the main agent's
// next request carries their reports as the results of its parallel tool
// calls, once the last of them is done.
//
// Sizes are of the request bodies, in bytes (the mock engine counts
// mock.BytesPerToken bytes a token). Requests go out at their times
// whether or not the previous one is answered, as every workload's do.
type Agent struct {
	Seed     uint64
	Kinds    int     // distinct agents (system prompt and tools); default 3
	Sessions int     // default 24
	Rate     float64 // session arrivals per second (Poisson); default 0.05
	MinTurns int     // main-agent requests per session; default 20
	MaxTurns int     // default 60

	PrefixBytes int // an agent's system prompt and tool definitions; default 20000
	// MinBytes and MaxBytes bound the size a session's last main-agent
	// request reaches, drawn per session; defaults 500000 and 1000000.
	MinBytes, MaxBytes int

	// ThinkTime is the mean (exponential) of the model's step before the
	// next request: its answer and the agent's own work. Default 2s.
	ThinkTime time.Duration
	// ToolTime is the median of a tool's run (log-normal: most are quick,
	// a few, builds and tests, take many times longer). Default 4s.
	ToolTime time.Duration

	Fanouts       int // sub-agent fan-outs per session; default 2, negative: none
	MaxSubAgents  int // most sub-agents per fan-out (each has 2 to this many); default 4
	SubAgentTurns int // most requests per sub-agent (each runs 2 to this many); default 4

	OutputTokens int    // every request's max_tokens; default 64
	Model        string // default "mock"
	NoStream     bool
}

func (a *Agent) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&a.Kinds, 3)
	def(&a.Sessions, 24)
	def(&a.MinTurns, 20)
	def(&a.MaxTurns, 60)
	def(&a.PrefixBytes, 20000)
	def(&a.MinBytes, 500_000)
	def(&a.MaxBytes, 1_000_000)
	def(&a.MaxSubAgents, 4)
	def(&a.SubAgentTurns, 4)
	def(&a.OutputTokens, 64)
	if a.Fanouts == 0 {
		a.Fanouts = 2
	}
	a.Fanouts = max(a.Fanouts, 0)
	a.MaxTurns = max(a.MaxTurns, a.MinTurns)
	a.MaxBytes = max(a.MaxBytes, a.MinBytes)
	if a.Rate <= 0 {
		a.Rate = 0.05
	}
	if a.ThinkTime <= 0 {
		a.ThinkTime = 2 * time.Second
	}
	if a.ToolTime <= 0 {
		a.ToolTime = 4 * time.Second
	}
	if a.Model == "" {
		a.Model = "mock"
	}
}

// agentTools are the agents' tools: a name and the argument it takes.
// "task" starts sub-agents.
var agentTools = [][2]string{
	{"read_file", "path"}, {"edit_file", "path"}, {"write_file", "path"}, {"bash", "command"},
	{"grep", "pattern"}, {"glob", "pattern"}, {"list_dir", "path"}, {"run_tests", "target"},
	{"web_fetch", "url"}, {"search_code", "query"}, {"todo_write", "items"}, {"task", "prompt"},
}

const taskTool = "task"

// genPromptLen is the length of the mock chat template's generation
// prompt, "<|assistant|>\n", which ends every rendered chat prompt.
const genPromptLen = len("<|assistant|>\n")

// toolSigma is the log-normal spread of tool results' sizes and tools'
// run times: a factor of e between the median and one standard deviation.
const toolSigma = 1.0

// agentPrefix is one agent's shared prefix: its tool definitions (JSON)
// and system prompt, PrefixBytes of body together.
type agentPrefix struct {
	tools  string
	system []byte
	tokens int // rendered, without the generation prompt
}

func (a *Agent) prefix(kind int, text *textSource) agentPrefix {
	// Three fifths tool definitions, two fifths system prompt, as in
	// coding agents whose many tools outweigh their instructions.
	toolBytes := a.PrefixBytes * 3 / 5
	entry := func(name, arg string, desc, argDesc []byte) []byte {
		b := []byte(`{"type":"function","function":{"name":"` + name + `","description":"`)
		b = append(b, desc...)
		b = append(b, `","parameters":{"type":"object","properties":{"`+arg+`":{"type":"string","description":"`...)
		b = append(b, argDesc...)
		return append(b, `"}},"required":["`+arg+`"]}}}`...)
	}
	fixed := 2 // [ and ]
	for i, t := range agentTools {
		fixed += len(entry(t[0], t[1], nil, nil)) + min(i, 1)
	}
	// Each tool's descriptions share what remains: four parts to the
	// tool, one to its argument.
	per := max(0, toolBytes-fixed) / len(agentTools) / mock.BytesPerToken
	tools := []byte{'['}
	for i, t := range agentTools {
		if i > 0 {
			tools = append(tools, ',')
		}
		desc := text.appendTokens([]byte("Agent "+strconv.Itoa(kind)+" tool. "), max(1, per*4/5-4))
		tools = append(tools, entry(t[0], t[1], desc, text.appendTokens(nil, max(1, per-per*4/5)))...)
	}
	tools = append(tools, ']')
	sysTokens := max(1, (a.PrefixBytes-len(tools))/mock.BytesPerToken-8)
	p := agentPrefix{tools: string(tools),
		system: text.appendTokens([]byte("You are coding agent "+strconv.Itoa(kind)+". "), sysTokens)}
	r, err := mock.Render(nil, mock.PathChat, chatBody(nil, a.Model, p.tools, []message{{role: "system", content: p.system}}, 1, false))
	if err == nil {
		p.tokens = (len(r) - genPromptLen) / mock.BytesPerToken
	}
	return p
}

// agentReq is a request under construction, with the generation index of
// the request whose prompt it extends (prev, -1: none) and whether it
// extends that prompt as a sub-agent's first request does (fork: from
// before the generation prompt).
type agentReq struct {
	Request
	prev int
	fork bool
}

// Generate builds the workload; the same Agent always gives the same one.
func (a Agent) Generate() *Workload {
	w, _, _ := a.generate()
	return w
}

// generate is Generate that also returns, per request, the index of the
// request whose prompt it extends (-1: none) and whether it is a
// sub-agent's first request, which extends that prompt from before its
// generation prompt.
func (a Agent) generate() (*Workload, []int, []bool) {
	a.defaults()
	rng := rand.New(rand.NewPCG(a.Seed, 0x6167656e74))
	text := newTextSource(a.Seed ^ 0xa9e7)
	prefixes := make([]agentPrefix, a.Kinds)
	for k := range prefixes {
		prefixes[k] = a.prefix(k, &text)
	}
	exp := func(mean time.Duration) time.Duration { return time.Duration(rng.ExpFloat64() * float64(mean)) }
	lognormal := func() float64 { return math.Exp(rng.NormFloat64() * toolSigma) }
	// A gap between two requests: the model's step and a tool's run
	// (log-normal, capped at 20 medians).
	gap := func() time.Duration {
		return exp(a.ThinkTime) + time.Duration(min(lognormal(), 20)*float64(a.ToolTime))
	}
	words := func(min, max int) []byte { return text.appendTokens(nil, min+rng.IntN(max-min+1)) }

	var reqs []agentReq
	var at time.Duration
	for sess := 0; sess < a.Sessions; sess++ {
		at += exp(time.Duration(float64(time.Second) / a.Rate))
		kind := rng.IntN(a.Kinds)
		p := prefixes[kind]
		turns := a.MinTurns + rng.IntN(a.MaxTurns-a.MinTurns+1)
		final := a.MinBytes + rng.IntN(a.MaxBytes-a.MinBytes+1)
		// Fan-outs at distinct turns that have a next turn to report to,
		// the first turn excepted.
		fanout := map[int]bool{}
		if turns > 2 {
			for _, k := range rng.Perm(turns - 2)[:min(a.Fanouts, turns-2)] {
				fanout[k+1] = true
			}
		}
		msgs := []message{{role: "system", content: p.system}, {role: "user", content: append([]byte("Task: "), words(32, 256)...)}}
		size := func(msgs []message) int { return chatBodyLen(a.Model, p.tools, msgs, a.OutputTokens, !a.NoStream) }
		add := func(t time.Duration, turn, prev int, fork bool, msgs []message) int {
			reqs = append(reqs, agentReq{Request: Request{At: t, Session: sess, Turn: turn, Path: mock.PathChat,
				Body:   chatBody(make([]byte, 0, size(msgs)), a.Model, p.tools, msgs, a.OutputTokens, !a.NoStream),
				Stream: !a.NoStream, OutputTokens: a.OutputTokens, Prefix: kind + 1, PrefixTokens: p.tokens},
				prev: prev, fork: fork})
			return len(reqs) - 1
		}
		// Each later turn's share of the growth to final: log-normal
		// weights, so that a few results (whole files, long logs) make
		// most of it; steady is the mean growth a turn, what a
		// sub-agent's turns grow by on average.
		weights := make([]float64, turns)
		sum := 0.0
		for i := 1; i < turns; i++ {
			weights[i] = lognormal()
			sum += weights[i]
		}
		start := size(msgs)
		steady := float64(max(0, final-start)) / float64(max(1, turns-1))
		target, done := float64(start), 0.0
		call := 0
		callID := func() string {
			call++
			return "call_" + strconv.Itoa(sess) + "_" + strconv.Itoa(call)
		}
		// exchange appends to msgs an assistant tool call and its result,
		// the result sized so that the body reaches want bytes.
		exchange := func(msgs []message, want int) []message {
			t := agentTools[rng.IntN(len(agentTools)-1)] // not task
			id := callID()
			var content []byte
			if rng.IntN(2) == 0 {
				content = words(8, 40)
			}
			msgs = append(msgs, message{role: "assistant", content: content, toolRaw: toolCalls([]string{id}, t[0], t[1], [][]byte{words(2, 12)})},
				message{role: "tool", content: []byte{}, toolRaw: `,"tool_call_id":"` + id + `"`})
			n := max(16, (want-size(msgs))/mock.BytesPerToken)
			msgs[len(msgs)-1].content = text.appendTokens(nil, n)
			return msgs
		}
		t := at
		prev := add(t, 0, -1, false, msgs)
		for k := 1; k < turns; k++ {
			done += weights[k]
			target = float64(start) + float64(final-start)*done/sum
			if !fanout[k-1] {
				msgs = exchange(msgs, int(target))
				t += gap()
				prev = add(t, k, prev, false, msgs)
				continue
			}
			// Turn k-1 answered with parallel task calls: its sub-agents
			// start at once from its prompt, and turn k carries their
			// reports once the last is done.
			n := min(2+rng.IntN(max(1, a.MaxSubAgents-1)), a.MaxSubAgents)
			forkAt := t + exp(a.ThinkTime)
			end := forkAt
			ids := make([]string, n)
			args := make([][]byte, n)
			parent := prev
			for j := range n {
				ids[j] = callID()
				args[j] = append([]byte("Sub-task "+strconv.Itoa(j)+": "), words(32, 128)...)
				sub := append(msgs[:len(msgs):len(msgs)], message{role: "user", content: args[j]})
				st := forkAt
				sp := add(st, k, parent, true, sub)
				steps := min(2+rng.IntN(max(1, a.SubAgentTurns-1)), a.SubAgentTurns)
				for s := 1; s < steps; s++ {
					sub = exchange(sub, size(sub)+int(steady*lognormal()/math.Exp(toolSigma*toolSigma/2)))
					st += gap()
					sp = add(st, k+s, sp, false, sub)
				}
				end = max(end, st+exp(a.ThinkTime))
			}
			var content []byte
			if rng.IntN(2) == 0 {
				content = words(8, 40)
			}
			msgs = append(msgs, message{role: "assistant", content: content, toolRaw: toolCalls(ids, taskTool, "prompt", args)})
			for j := range n {
				msgs = append(msgs, message{role: "tool", content: []byte{}, toolRaw: `,"tool_call_id":"` + ids[j] + `"`})
			}
			// The reports share what remains to the target.
			each := max(16, (int(target)-size(msgs))/n/mock.BytesPerToken)
			for j := range n {
				msgs[len(msgs)-n+j].content = append([]byte("Report: "), text.appendTokens(nil, each-2)...)
			}
			t = end
			prev = add(t, k, prev, false, msgs)
		}
	}
	return agentSort(reqs)
}

// toolCalls is the raw tool_calls member of an assistant message calling
// tool once per id, with args[i] as the argument arg of call i.
func toolCalls(ids []string, tool, arg string, args [][]byte) string {
	b := []byte(`,"tool_calls":[`)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":"`+id+`","type":"function","function":{"name":"`+tool+`","arguments":"{\"`+arg+`\":\"`...)
		b = append(b, args[i]...)
		b = append(b, `\"}"}}`...)
	}
	return string(append(b, ']'))
}

// chatBodyLen is len(chatBody(nil, model, tools, msgs, maxTokens, stream)).
func chatBodyLen(model, tools string, msgs []message, maxTokens int, stream bool) int {
	n := len(chatBody(nil, model, tools, nil, maxTokens, stream))
	for i, m := range msgs {
		n += len(`{"role":"","content":}`) + len(m.role) + len(m.toolRaw) + min(i, 1)
		if m.content == nil {
			n += len("null")
		} else {
			n += len(m.content) + 2
		}
	}
	return n
}

// agentSort orders reqs by arrival (generation order among equals) into a
// workload, and maps each request's prev to its new index.
func agentSort(reqs []agentReq) (*Workload, []int, []bool) {
	idx := make([]int, len(reqs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(x, y int) bool { return reqs[idx[x]].At < reqs[idx[y]].At })
	pos := make([]int, len(idx))
	for to, from := range idx {
		pos[from] = to
	}
	w := &Workload{Name: "agent", Requests: make([]Request, len(reqs))}
	prev := make([]int, len(reqs))
	fork := make([]bool, len(reqs))
	for to, from := range idx {
		w.Requests[to] = reqs[from].Request
		prev[to], fork[to] = -1, reqs[from].fork
		if p := reqs[from].prev; p >= 0 {
			prev[to] = pos[p]
		}
	}
	return w, prev, fork
}
