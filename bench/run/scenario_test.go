package run

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/bench/workload"
)

func TestCapacityOf(t *testing.T) {
	t.Parallel()
	w := workload.Synthetic{Seed: 1, Sessions: 1, MinTurns: 1, MaxTurns: 1, SystemPromptTokens: 64, UserTokens: 16, OutputTokens: 9, ToolRate: 0}.Generate()
	var novel []int
	if _, err := workload.IdealNovel(w.Requests, 16, &novel); err != nil || len(novel) != 1 {
		t.Fatalf("%v %v", novel, err)
	}
	ecfg := mock.Config{MaxSeqs: 4, BlockTokens: 16, PrefillOverhead: 5 * time.Millisecond, PrefillPerToken: 100 * time.Microsecond,
		DecodePerToken: 10 * time.Millisecond, TimeScale: 0.5}
	c, err := CapacityOf(w, ecfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	prefill := (5*time.Millisecond + time.Duration(novel[0])*100*time.Microsecond) / 2
	service := prefill + 8*10*time.Millisecond/2 // 9 tokens: 8 decode steps after the first
	if c.MeanPrefill != prefill || c.MeanService != service || c.Engines != 3 || c.MaxSeqs != 4 {
		t.Fatalf("%+v, want prefill %v service %v", c, prefill, service)
	}
	if want := 12 / service.Seconds(); c.PerSecond != want {
		t.Fatalf("capacity %v, want %v", c.PerSecond, want)
	}
	if want := 3 / prefill.Seconds(); c.PrefillBound != want {
		t.Fatalf("prefill bound %v, want %v", c.PrefillBound, want)
	}
}

func TestErrorKinds(t *testing.T) {
	t.Parallel()
	body := []byte(`{"error":{"message":"full","type":"rate_limit_exceeded","param":null,"code":"queue_full"}}`)
	if got := errorCode(body); got != "queue_full" {
		t.Fatalf("code %q", got)
	}
	for _, c := range []struct {
		o    outcome
		want string
	}{
		{outcome{status: 429, code: "queue_timeout", err: errors.New("x")}, "429 queue_timeout"},
		{outcome{status: 502, err: errors.New("x")}, "502"},
		{outcome{status: 0, err: errors.New("connection reset")}, "transport: connection reset"},
		{outcome{status: 200, err: errNoDone}, "200 " + errNoDone.Error()[:60]},
	} {
		if got := errorKind(&c.o); got != c.want {
			t.Errorf("%+v: %q, want %q", c.o, got, c.want)
		}
	}
}

// summarize counts arrivals and TTFT in the window, completions by when
// they end, and every failure of the run.
func TestSummarize(t *testing.T) {
	t.Parallel()
	start := time.Unix(1000, 0)
	ms := time.Millisecond
	w := &workload.Workload{Requests: []workload.Request{
		{At: 0, Tenant: "t0"},                       // before the window; ends in it
		{At: 100 * ms, Tenant: "t1"},                // in
		{At: 150 * ms, Tenant: "flooder"},           // in, shed
		{At: 200 * ms, Tenant: "flooder"},           // in
		{At: 390 * ms, Tenant: "t0"},                // in; ends after
		{At: 400 * ms, Tenant: "t1", Class: "high"}, // after the window
	}}
	at := func(d time.Duration) time.Time { return start.Add(d) }
	res := &Result{start: start, outcomes: []outcome{
		{sent: at(0), ttft: 20 * ms, e2e: 150 * ms},
		{sent: at(100 * ms), ttft: 10 * ms, e2e: 50 * ms},
		{sent: at(150 * ms), status: 429, code: "queue_full", err: errors.New("429")},
		{sent: at(200 * ms), ttft: 40 * ms, e2e: 100 * ms},
		{sent: at(390 * ms), ttft: 30 * ms, e2e: 100 * ms},
		{sent: at(400 * ms), status: 503, err: errors.New("503")},
	}}
	sr := summarize("x", 2, w, res, 100*ms, 400*ms)
	// Arrivals in [100ms, 400ms): 4 over 0.3 s; completions ending there: 3.
	if sr.Offered != 4/0.3 || sr.Goodput != 3/0.3 || sr.Requests != 6 {
		t.Fatalf("offered %v goodput %v requests %d", sr.Offered, sr.Goodput, sr.Requests)
	}
	if len(sr.Errors) != 2 || sr.Errors["429 queue_full"] != 1 || sr.Errors["503"] != 1 {
		t.Fatalf("errors %v", sr.Errors)
	}
	want := []Group{
		{Name: "all", Sent: 4, OK: 3, TTFTp50: 30 * ms, TTFTp99: 40 * ms},
		{Name: "class normal", Sent: 4, OK: 3, TTFTp50: 30 * ms, TTFTp99: 40 * ms},
		{Name: "normal tenants", Sent: 2, OK: 2, TTFTp50: 10 * ms, TTFTp99: 30 * ms},
		{Name: "first turns", Sent: 4, OK: 3, TTFTp50: 30 * ms, TTFTp99: 40 * ms},
		{Name: "flooder", Sent: 2, OK: 1, TTFTp50: 40 * ms, TTFTp99: 40 * ms},
	}
	if len(sr.Groups) != len(want) {
		t.Fatalf("groups %+v", sr.Groups)
	}
	for i := range want {
		if sr.Groups[i] != want[i] {
			t.Errorf("group %d: %+v, want %+v", i, sr.Groups[i], want[i])
		}
	}
}

// A flood scenario end to end: both runs replay the same normal tenants'
// requests, the flooder's only in the second, with their tenants sent.
func TestFloodScenario(t *testing.T) {
	var mu sync.Mutex
	tenants := map[string]int{}
	factory := func(policy string, backends []string) (Proxy, error) {
		return newTestProxySeeing("127.0.0.1:0", policy, backends, func(r *http.Request) {
			mu.Lock()
			tenants[r.Header.Get("X-KVCA-Tenant")]++
			mu.Unlock()
		})
	}
	spec := Spec{
		Run: Options{Engines: 2, Engine: mock.Config{MaxSeqs: 4, BlockTokens: 16, DecodePerToken: 5 * time.Millisecond, TimeScale: 1},
			Policies: []string{"round-robin"}},
		Synth: workload.Synthetic{Seed: 2, MinTurns: 2, MaxTurns: 2, ThinkTime: 50 * time.Millisecond, SystemPrompts: 1,
			SystemPromptTokens: 64, UserTokens: 16, OutputTokens: 4, ToolRate: 0},
		Kind: "chat",
		JSON: filepath.Join(t.TempDir(), "flood.json"),
	}
	var out bytes.Buffer
	err := RunScenario(context.Background(), spec, Scenario{Name: ScenarioFlood, Load: 0.2, Duration: time.Second, Tenants: 3, FloodFactor: 2}, factory, &out)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(spec.JSON)
	if err != nil {
		t.Fatal(err)
	}
	var rep ScenarioReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 || rep.Runs[0].Name != "without flooder" || rep.Runs[1].Name != "with flooder" || rep.Policy != "round-robin" {
		t.Fatalf("runs %+v", rep.Runs)
	}
	alone, flood := rep.Runs[0], rep.Runs[1]
	n0, _ := alone.group("normal tenants")
	n1, _ := flood.group("normal tenants")
	f, ok := flood.group("flooder")
	if _, extra := alone.group("flooder"); extra || !ok || n0.Sent == 0 || n0.Sent != n1.Sent || f.Sent < n1.Sent {
		t.Fatalf("groups %+v / %+v", alone.Groups, flood.Groups)
	}
	if len(alone.Errors)+len(flood.Errors) != 0 || n1.OK != n1.Sent {
		t.Fatalf("errors %v %v", alone.Errors, flood.Errors)
	}
	if len(rep.Checks) != 3 || !strings.Contains(out.String(), "normal tenants' TTFT p99 with / without flooder") ||
		!strings.Contains(out.String(), "capacity = 2 engines × 4 seqs") {
		t.Fatalf("checks %+v\n%s", rep.Checks, out.String())
	}
	// Three normal tenants in both runs, the flooder in the second only.
	normal := n0.Sent + n1.Sent
	if len(tenants) != 4 || tenants["flooder"] == 0 || tenants["tenant-0"]+tenants["tenant-1"]+tenants["tenant-2"] < normal {
		t.Fatalf("tenants seen %v", tenants)
	}
}
