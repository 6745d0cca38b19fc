package workload

import (
	"encoding/json"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"

	"github.com/kvca/kvca/bench/mock"
)

// Threads is Synthetic's conversations sent as Responses API threads: the
// first turn carries the instructions and the user's message, every later
// turn only its new user message and previous_response_id, the id of the
// previous turn's answer. Only the engine that produced that answer stores
// the thread, so a continuation sent anywhere else fails: routing must
// follow the thread, since the prefix is not in the request at all.
// (Tool calls are not part of it: a thread continues with user turns.)
func (s Synthetic) Threads() *Workload {
	s.defaults()
	rng := rand.New(rand.NewPCG(s.Seed, 0x74687264))
	text := newTextSource(s.Seed ^ 0x7468)
	systems := make([]string, s.SystemPrompts)
	for i := range systems {
		systems[i] = string(text.appendTokens([]byte("You are assistant "+strconv.Itoa(i)+". "), s.SystemPromptTokens-5))
	}
	w := &Workload{Name: "threads"}
	var at time.Duration
	exp := func(mean time.Duration) time.Duration { return time.Duration(rng.ExpFloat64() * float64(mean)) }
	answer := mock.OutputText(s.OutputTokens)
	type item = map[string]any
	for sess := 0; sess < s.Sessions; sess++ {
		at += exp(time.Duration(float64(time.Second) / s.Rate))
		system := systems[rng.IntN(len(systems))]
		turns := s.MinTurns + rng.IntN(s.MaxTurns-s.MinTurns+1)
		var history []item
		t := at
		prev := -1
		for turn := 0; turn < turns; turn++ {
			n := max(1, s.UserTokens/2+rng.IntN(s.UserTokens+1))
			user := item{"role": "user", "content": string(text.appendTokens(nil, n))}
			req := map[string]any{"model": s.Model, "input": []item{user}, "max_output_tokens": s.OutputTokens}
			if !s.NoStream {
				req["stream"] = true
			}
			if turn == 0 {
				req["instructions"] = system
			}
			body, _ := json.Marshal(req)
			history = append(history, user)
			full, _ := json.Marshal(map[string]any{"model": s.Model, "instructions": system, "input": history, "max_output_tokens": s.OutputTokens})
			w.Requests = append(w.Requests, Request{At: t, Session: sess, Turn: turn, Path: mock.PathResponses,
				Body: body, Full: full, Stream: !s.NoStream, OutputTokens: s.OutputTokens, Continues: prev + 1})
			// What the engine stores as the answer, for the next Full.
			history = append(history, item{"type": "message", "role": "assistant",
				"content": []item{{"type": "output_text", "text": answer}}})
			prev = len(w.Requests) - 1
			t += exp(s.ThinkTime)
		}
	}
	sortByArrival(w)
	return w
}

// sortByArrival orders w's requests by time, keeping Continues pointing at
// the same requests.
func sortByArrival(w *Workload) {
	idx := make([]int, len(w.Requests))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return w.Requests[idx[a]].At < w.Requests[idx[b]].At })
	pos := make([]int, len(idx))
	sorted := make([]Request, len(idx))
	for to, from := range idx {
		pos[from] = to
		sorted[to] = w.Requests[from]
	}
	for i := range sorted {
		if c := sorted[i].Continues; c > 0 {
			sorted[i].Continues = pos[c-1] + 1
		}
	}
	w.Requests = sorted
}
