package run

import (
	"context"
	"testing"

	"github.com/kvca/kvca/bench/workload"
)

func fastArrivals(w *workload.Workload) *workload.Workload {
	for i := range w.Requests {
		w.Requests[i].At /= 1000
	}
	return w
}

// Replayed one at a time on one engine, every agentic workload runs
// without an error and the engine hits exactly the workload's ideal: the
// Messages API prompts extend turn by turn, and a thread continued by
// previous_response_id renders as the whole conversation resent.
func TestAgenticWorkloadsSerialMatchIdeal(t *testing.T) {
	msgs, err := workload.AsMessages(smallWorkload())
	if err != nil {
		t.Fatal(err)
	}
	syn := workload.Synthetic{Seed: 9, Sessions: 8, MinTurns: 2, MaxTurns: 4, SystemPromptTokens: 256, UserTokens: 48, OutputTokens: 4}
	for _, w := range []*workload.Workload{
		msgs,
		fastArrivals(syn.Threads()),
		fastArrivals(syn.Threads()), // streamed and not: ids come from both
		fastArrivals(workload.SubAgents{Seed: 4, Sessions: 4, Agents: 3, ContextTokens: 256, SystemTokens: 128, UserTokens: 32, OutputTokens: 4}.Generate()),
	} {
		opt := fastEngines(1)
		opt.Policies = []string{"round-robin"}
		opt.MaxInFlight = 1
		rep, err := Run(context.Background(), w, opt, inProcess)
		if err != nil {
			t.Fatal(err)
		}
		res := rep.Results[0]
		if res.Errors != 0 {
			t.Fatalf("%s: %d errors %v", w.Name, res.Errors, res.ErrorSamples)
		}
		ideal, _ := workload.Ideal(w.Requests, 16)
		st := res.EngineStats[0]
		if st.QueryTokens != uint64(ideal.QueryTokens) || st.HitTokens != uint64(ideal.HitTokens) {
			t.Fatalf("%s: engine counted %d/%d tokens, ideal %d/%d", w.Name, st.HitTokens, st.QueryTokens, ideal.HitTokens, ideal.QueryTokens)
		}
		t.Logf("%s: %d requests, hit rate %.3f = ideal", w.Name, len(w.Requests), res.HitRate)
		syn.NoStream = true
	}
}

// Spread over two engines without regard to the thread, a continuation
// reaches an engine that never produced its previous response half the
// time, and fails as OpenAI's API fails it.
func TestThreadsNeedTheirEngine(t *testing.T) {
	w := fastArrivals(workload.Synthetic{Seed: 9, Sessions: 8, MinTurns: 3, MaxTurns: 3, SystemPromptTokens: 64, UserTokens: 16, OutputTokens: 2}.Threads())
	opt := fastEngines(2)
	opt.Policies = []string{"round-robin"}
	opt.MaxInFlight = 1
	rep, err := Run(context.Background(), w, opt, inProcess)
	if err != nil {
		t.Fatal(err)
	}
	// Sent one at a time, the n-th request the proxy sees goes to engine
	// n%2: a turn fails when the turn it continues failed (it is not sent
	// at all) or was answered by the other engine.
	engine := make([]int, len(w.Requests))
	ok := make([]bool, len(w.Requests))
	want, seen := 0, 0
	for j, r := range w.Requests {
		if p := r.Continues - 1; p >= 0 && !ok[p] {
			want++
			continue
		}
		seen++
		engine[j] = seen % 2
		ok[j] = r.Continues == 0 || engine[r.Continues-1] == engine[j]
		if !ok[j] {
			want++
		}
	}
	if res := rep.Results[0]; res.Errors != want || want == 0 {
		t.Fatalf("%d errors, want %d: %v", res.Errors, want, res.ErrorSamples)
	}
}
