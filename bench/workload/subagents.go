package workload

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/kvca/kvca/bench/mock"
)

// SubAgents is a coding agent's sessions on the Messages API: a session
// starts with a request of the main agent; after its think time, the agent
// fans out Agents sub-agent requests at the same instant, each a first
// turn that shares a prefix new to the fleet (the sub-agent instructions
// and a context the session just gathered, ContextTokens long) and differs
// only in its task; then the main agent continues. Every request names its
// session with the x-claude-code-session-id header, as Claude Code does.
// Without that name, nothing tells a router where the siblings' prefix
// will live: they arrive before any of them is answered.
type SubAgents struct {
	Seed          uint64
	Sessions      int           // default 100
	Rate          float64       // session arrivals per second; default 5
	Rounds        int           // fan-outs per session; default 2
	Agents        int           // sub-agent requests per fan-out; default 4
	ContextTokens int           // the siblings' new shared prefix; default 2048
	TaskTokens    int           // each sibling's own task; default 64
	SystemTokens  int           // the main agent's system prompt, shared by all sessions; default 1024
	UserTokens    int           // a main-agent turn; default 128
	OutputTokens  int           // every request's max_tokens; default 64
	ThinkTime     time.Duration // mean gap between a session's steps; default 2s
	Model         string        // default "mock"
	NoStream      bool
}

func (s *SubAgents) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&s.Sessions, 100)
	def(&s.Rounds, 2)
	def(&s.Agents, 4)
	def(&s.ContextTokens, 2048)
	def(&s.TaskTokens, 64)
	def(&s.SystemTokens, 1024)
	def(&s.UserTokens, 128)
	def(&s.OutputTokens, 64)
	if s.Rate <= 0 {
		s.Rate = 5
	}
	if s.ThinkTime <= 0 {
		s.ThinkTime = 2 * time.Second
	}
	if s.Model == "" {
		s.Model = "mock"
	}
}

// SessionHeader is the header SubAgents names its sessions with.
const SessionHeader = "x-claude-code-session-id"

// Generate builds the workload; the same SubAgents always gives the same one.
func (s SubAgents) Generate() *Workload {
	s.defaults()
	rng := rand.New(rand.NewPCG(s.Seed, 0x73756261))
	text := newTextSource(s.Seed ^ 0x5ab)
	system := string(text.appendTokens([]byte("You are a coding agent. "), s.SystemTokens-5))
	subSystem := string(text.appendTokens([]byte("You are a sub-agent. "), s.SystemTokens/4))
	answer := mock.OutputText(s.OutputTokens)
	w := &Workload{Name: "subagents"}
	var at time.Duration
	exp := func(mean time.Duration) time.Duration { return time.Duration(rng.ExpFloat64() * float64(mean)) }
	type msg = map[string]any
	body := func(sys string, msgs []msg) []byte {
		req := map[string]any{"model": s.Model, "max_tokens": s.OutputTokens, "system": sys, "messages": msgs}
		if !s.NoStream {
			req["stream"] = true
		}
		b, _ := json.Marshal(req)
		return b
	}
	for sess := 0; sess < s.Sessions; sess++ {
		at += exp(time.Duration(float64(time.Second) / s.Rate))
		hdr := [][2]string{{SessionHeader, "session-" + strconv.FormatUint(s.Seed, 10) + "-" + strconv.Itoa(sess)}}
		t := at
		turn := 0
		var main []msg
		step := func() {
			main = append(main, msg{"role": "user", "content": string(text.appendTokens(nil, max(1, s.UserTokens/2+rng.IntN(s.UserTokens+1))))})
			w.Requests = append(w.Requests, Request{At: t, Session: sess, Turn: turn, Path: mock.PathMessages,
				Body: body(system, main), Stream: !s.NoStream, OutputTokens: s.OutputTokens, Headers: hdr})
			main = append(main, msg{"role": "assistant", "content": answer})
			turn++
			t += exp(s.ThinkTime)
		}
		step()
		for round := 0; round < s.Rounds; round++ {
			context := string(text.appendTokens(nil, s.ContextTokens))
			for a := 0; a < s.Agents; a++ {
				task := context + "Task " + strconv.Itoa(a) + ": " + string(text.appendTokens(nil, s.TaskTokens))
				w.Requests = append(w.Requests, Request{At: t, Session: sess, Turn: turn, Path: mock.PathMessages,
					Body: body(subSystem, []msg{{"role": "user", "content": task}}), Stream: !s.NoStream,
					OutputTokens: s.OutputTokens, Headers: hdr})
			}
			turn++
			t += exp(s.ThinkTime)
			step()
		}
	}
	sortByArrival(w)
	return w
}
