package workload

import (
	"math/rand/v2"
	"sort"
	"strconv"
	"time"

	"github.com/kvca/kvca/bench/mock"
)

// Synthetic describes multi-turn chat traffic: sessions arrive as a Poisson
// process, each with a shared system prompt and several turns separated by
// think time, some turns calling a tool.
type Synthetic struct {
	Seed     uint64
	Sessions int     // default 100
	Rate     float64 // session arrivals per second; default 5
	MinTurns int     // default 2
	MaxTurns int     // default 6

	// ThinkTime is the mean gap (exponential) between one request of a
	// session and the next: the previous answer plus the user's reading and
	// typing. Default 2s.
	ThinkTime time.Duration

	SystemPrompts int // distinct shared system prompts; default 4
	// CyclePrompts gives conversation i system prompt i mod SystemPrompts
	// instead of a random one (the other draws stay the same): prompts
	// then take equal shares, and a client dealing conversations in turn
	// over as many engines as prompts deals each prompt to one engine.
	CyclePrompts       bool
	SystemPromptTokens int // default 1024
	UserTokens         int // mean tokens of a user message; default 128
	OutputTokens       int // max_tokens of every request, and the history's answer length; default 64

	// ToolRate is the probability that a turn's answer is a tool call, which
	// the client follows with the tool's result in a request of its own.
	ToolRate   float64 // default 0.2
	ToolTokens int     // tokens of a tool result; default 96

	Model    string // default "mock"
	NoStream bool
}

func (s *Synthetic) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&s.Sessions, 100)
	def(&s.MinTurns, 2)
	def(&s.MaxTurns, 6)
	def(&s.SystemPrompts, 4)
	def(&s.SystemPromptTokens, 1024)
	def(&s.UserTokens, 128)
	def(&s.OutputTokens, 64)
	def(&s.ToolTokens, 96)
	if s.MaxTurns < s.MinTurns {
		s.MaxTurns = s.MinTurns
	}
	if s.Rate <= 0 {
		s.Rate = 5
	}
	if s.ThinkTime <= 0 {
		s.ThinkTime = 2 * time.Second
	}
	if s.ToolRate < 0 {
		s.ToolRate = 0
	}
	if s.Model == "" {
		s.Model = "mock"
	}
}

const toolsJSON = `[{"type":"function","function":{"name":"lookup","description":"Look a fact up.","parameters":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}}}]`

// Generate builds the workload; the same Synthetic always gives the same one.
func (s Synthetic) Generate() *Workload {
	s.defaults()
	rng := rand.New(rand.NewPCG(s.Seed, 0x6b766361))
	text := newTextSource(s.Seed ^ 0x5eed)
	systems := make([][]byte, s.SystemPrompts)
	for i := range systems {
		systems[i] = text.appendTokens([]byte("You are assistant "+strconv.Itoa(i)+". "), s.SystemPromptTokens-5)
	}
	w := &Workload{Name: "synthetic"}
	var at time.Duration
	exp := func(mean time.Duration) time.Duration { return time.Duration(rng.ExpFloat64() * float64(mean)) }
	for sess := 0; sess < s.Sessions; sess++ {
		at += exp(time.Duration(float64(time.Second) / s.Rate))
		tools := ""
		if s.ToolRate > 0 {
			tools = toolsJSON
		}
		sys := rng.IntN(len(systems))
		if s.CyclePrompts {
			sys = sess % len(systems)
		}
		msgs := []message{{role: "system", content: systems[sys]}}
		turns := s.MinTurns + rng.IntN(s.MaxTurns-s.MinTurns+1)
		t := at
		req := 0
		send := func() {
			body := chatBody(nil, s.Model, tools, msgs, s.OutputTokens, !s.NoStream)
			w.Requests = append(w.Requests, Request{At: t, Session: sess, Turn: req, Path: mock.PathChat,
				Body: body, Stream: !s.NoStream, OutputTokens: s.OutputTokens,
				Prefix: sys + 1, PrefixTokens: s.SystemPromptTokens})
			req++
			t += exp(s.ThinkTime)
		}
		for turn := 0; turn < turns; turn++ {
			n := max(1, s.UserTokens/2+rng.IntN(s.UserTokens+1))
			msgs = append(msgs, message{role: "user", content: text.appendTokens(nil, n)})
			send()
			if rng.Float64() < s.ToolRate {
				id := "call_" + strconv.Itoa(sess) + "_" + strconv.Itoa(turn)
				msgs = append(msgs,
					message{role: "assistant", toolRaw: `,"tool_calls":[{"id":"` + id + `","type":"function","function":{"name":"lookup","arguments":"{\"q\":\"` + strconv.Itoa(turn) + `\"}"}}]`},
					message{role: "tool", content: text.appendTokens(nil, s.ToolTokens), toolRaw: `,"tool_call_id":"` + id + `"`})
				send()
			}
			msgs = append(msgs, message{role: "assistant", content: text.appendTokens(nil, s.OutputTokens)})
		}
	}
	sort.SliceStable(w.Requests, func(i, j int) bool { return w.Requests[i].At < w.Requests[j].At })
	return w
}
