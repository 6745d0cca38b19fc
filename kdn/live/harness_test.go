package live_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/kdn"
	"github.com/kvca/kvca/kdn/gateway"
	"github.com/kvca/kvca/kdn/live"
)

const compat = "test-deploy"

// harness is kvca with the live gateway in front of mock engines, all on
// loopback.
type harness struct {
	t       *testing.T
	srv     *edge.Server
	gw      *live.Gateway
	engines []*mock.Engine
	admin   string
	client  *http.Client

	closeOnce sync.Once
}

type setup struct {
	engines  int
	reuse    []*mock.Engine // engines started by the test (a kvca restart); engines is then ignored
	ttl      time.Duration
	stateDir string
	maxPins  int
	faults   mock.Faults
	// configure, when set, changes kvca's configuration last (backends
	// included).
	configure func(*edge.Config)
}

func newHarness(t *testing.T, s setup) *harness {
	t.Helper()
	if s.engines == 0 {
		s.engines = 2
	}
	if s.ttl == 0 {
		s.ttl = 300 * time.Millisecond
	}
	h := &harness{t: t, client: &http.Client{Timeout: 10 * time.Second}}
	cfg := edge.DefaultConfig()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Table.TTL = s.ttl
	cfg.Table.BlockSize = 64
	cfg.HealthInterval = 50 * time.Millisecond
	cfg.Table.HashKey = "000102030405060708090a0b0c0d0e0f"
	if s.reuse != nil {
		h.engines = s.reuse
	} else {
		h.engines = startEngines(t, s.engines, s.faults)
	}
	for _, e := range h.engines {
		cfg.Backends = append(cfg.Backends, e.URL())
	}
	if s.configure != nil {
		s.configure(&cfg)
	}
	srv, err := edge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := live.New(srv, live.Options{CompatibilityProfileID: compat, StateDir: s.stateDir, MaxPinnedBlocks: s.maxPins})
	if err != nil {
		t.Fatal(err)
	}
	gw.Mount()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	h.srv, h.gw, h.admin = srv, gw, "http://"+srv.AdminAddr()
	t.Cleanup(h.close)
	return h
}

// close stops kvca (not the engines); the test may call it early to start
// another kvca on the same engines and state dir.
func (h *harness) close() {
	h.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.srv.Shutdown(ctx)
		h.gw.Close()
	})
}

// startEngines starts n mock engines on loopback, stopped at the end of
// the test.
func startEngines(t *testing.T, n int, faults mock.Faults) []*mock.Engine {
	t.Helper()
	var es []*mock.Engine
	for i := 0; i < n; i++ {
		e := mock.New(mock.Config{Name: fmt.Sprintf("e%d", i), TimeScale: 0.01, RecordBodies: true, Faults: faults})
		if err := e.Start("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		es = append(es, e)
	}
	return es
}

// do sends a raw request to the admin listener.
func (h *harness) do(method, path string, body []byte) (int, []byte) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.admin+path, bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.StatusCode, out
}

// call posts one KDN operation and returns its answer, after checking that
// the answer is 200 and a valid message of the operation's response model.
func (h *harness) call(op string, req map[string]any) map[string]any {
	h.t.Helper()
	body, _ := json.Marshal(req)
	status, out := h.do("POST", live.APIPrefix+op, body)
	if status != 200 {
		h.t.Fatalf("%s: HTTP %d %s", op, status, out)
	}
	model := ""
	for _, o := range gateway.Operations() {
		if o.Name == op {
			model = o.ResponseModel
		}
	}
	if _, err := kdn.Decode(model, out); err != nil {
		h.t.Fatalf("%s: answer is not a valid %s: %v\n%s", op, model, err, out)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		h.t.Fatal(err)
	}
	return m
}

// target is one endpoint as a client addresses it.
type target struct {
	id  string
	gen int64
}

func (h *harness) targets() []target {
	h.t.Helper()
	r := h.call("get_lmcache_endpoints", map[string]any{"runtime_profile": "v1"})
	mustOutcome(h.t, r, "success")
	var ts []target
	for _, e := range r["endpoints"].([]any) {
		m := e.(map[string]any)
		ts = append(ts, target{m["endpoint_id"].(string), int64(m["generation"].(float64))})
	}
	return ts
}

// req is a targeted request for tg with extra fields.
func req(tg target, extra map[string]any) map[string]any {
	m := map[string]any{
		"runtime_profile": "v1", "compatibility_profile_id": compat,
		"endpoint_id": tg.id, "endpoint_generation": tg.gen,
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func mustOutcome(t *testing.T, r map[string]any, want string) {
	t.Helper()
	if r["outcome"] != want {
		t.Fatalf("outcome %v, want %s: %v", r["outcome"], want, r)
	}
}

func errMessage(r map[string]any) string {
	e, _ := r["error"].(map[string]any)
	s, _ := e["message"].(string)
	return s
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// longPrefix is a chat request with a long shared system prompt (the kind
// of prefix worth warming), a few KB.
func longPrefix() []byte {
	var sb strings.Builder
	for i := 0; i < 60; i++ {
		fmt.Fprintf(&sb, "Rule %d: answer from the handbook, cite the section, keep it short. ", i)
	}
	b, _ := json.Marshal(map[string]any{
		"model": "mock",
		"messages": []any{
			map[string]any{"role": "system", "content": sb.String()},
		},
		"max_tokens": 256,
		"stream":     true,
	})
	return b
}

// registerPrefix registers knowledge id with revision 1 and uploads body
// as its prefix; it returns the artifact id.
func (h *harness) registerPrefix(id string, body []byte) string {
	h.t.Helper()
	r := h.call("register_knowledge", map[string]any{"runtime_profile": "v1", "knowledge_id": id})
	mustOutcome(h.t, r, "success")
	status, out := h.do("PUT", live.PrefixPrefix+id, body)
	if status != 200 {
		h.t.Fatalf("prefix upload: %d %s", status, out)
	}
	var a live.PrefixAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		h.t.Fatal(err)
	}
	if a.Blocks < 10 {
		h.t.Fatalf("prefix of %d blocks; want a long one", a.Blocks)
	}
	return a.ArtifactID
}

// task returns the operation of an answer.
func task(t *testing.T, r map[string]any) map[string]any {
	t.Helper()
	op, ok := r["operation"].(map[string]any)
	if !ok {
		t.Fatalf("no operation in %v", r)
	}
	return op
}

// waitTask polls the operation's status until it is terminal.
func (h *harness) waitTask(tg target, id string) map[string]any {
	h.t.Helper()
	var last map[string]any
	waitFor(h.t, "task "+id+" finished", func() bool {
		r := h.call("get_operation_status", req(tg, map[string]any{"task_id": id}))
		mustOutcome(h.t, r, "success")
		last = task(h.t, r)
		s := last["state"]
		return s == "succeeded" || s == "failed" || s == "cancelled"
	})
	return last
}

// observe returns the observation state of artifact on tg.
func (h *harness) observe(tg target, artifact string) (string, map[string]any) {
	h.t.Helper()
	r := h.call("get_cache_observation", req(tg, map[string]any{"artifact_id": artifact}))
	mustOutcome(h.t, r, "success")
	o := r["observation"].(map[string]any)
	return o["state"].(string), o
}

// followUp is a client request that continues longPrefix: a follow-up
// turn, which kvca's policy routes by prefix (a first turn would go to the
// least-loaded backend).
func followUp(i int) []byte {
	var m map[string]any
	json.Unmarshal(longPrefix(), &m)
	m["messages"] = append(m["messages"].([]any),
		map[string]any{"role": "user", "content": fmt.Sprintf("question %d", i)},
		map[string]any{"role": "assistant", "content": "see section 4"},
		map[string]any{"role": "user", "content": "and then?"})
	m["stream"] = false
	b, _ := json.Marshal(m)
	return b
}

// chat sends a chat request through kvca's public listener.
func (h *harness) chat(body []byte) {
	h.t.Helper()
	resp, err := h.client.Post("http://"+h.srv.Addr()+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		h.t.Fatalf("chat: HTTP %d", resp.StatusCode)
	}
}
