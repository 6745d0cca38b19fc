package mock

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvca/kvca/internal/testkit"
)

func startEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 0.001
	}
	return testkit.Start(t, New(cfg))
}

func post(t *testing.T, e *Engine, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(e.URL()+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("response %q: %v", data, err)
	}
	return resp.StatusCode, out
}

// chatBody builds a request whose user turns are n-token strings.
func chatBody(stream bool, maxTokens int, turns ...string) string {
	var msgs []string
	for i, c := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":%q}`, role, c))
	}
	return fmt.Sprintf(`{"model":"mock","stream":%v,"stream_options":{"include_usage":true},"max_tokens":%d,"messages":[%s]}`,
		stream, maxTokens, strings.Join(msgs, ","))
}

func TestPrefixHitsCounted(t *testing.T) {
	e := startEngine(t, Config{BlockTokens: 16, RecordBodies: true})
	user1 := strings.Repeat("abcd", 100)
	b1 := chatBody(false, 3, user1)
	code, r1 := post(t, e, PathChat, b1)
	if code != 200 {
		t.Fatalf("status %d: %v", code, r1)
	}
	p1, _ := Render(nil, PathChat, []byte(b1))
	usage := r1["usage"].(map[string]any)
	if int(usage["prompt_tokens"].(float64)) != Tokens(p1) || usage["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64) != 0 {
		t.Fatalf("first usage %v, prompt tokens %d", usage, Tokens(p1))
	}
	b2 := chatBody(false, 3, user1, "sure", "more please")
	_, r2 := post(t, e, PathChat, b2)
	p2, _ := Render(nil, PathChat, []byte(b2))
	if !bytes.HasPrefix(p2, p1) {
		t.Fatal("follow-up prompt does not extend the first")
	}
	wantHit := len(p1) / 4 / 16 * 16 // complete blocks of the first prompt
	got := int(r2["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64))
	if got != wantHit {
		t.Fatalf("cached_tokens = %d, want %d", got, wantHit)
	}
	st := e.Stats()
	if st.QueryTokens != uint64(Tokens(p1)+Tokens(p2)) || st.HitTokens != uint64(wantHit) || st.Requests != 2 {
		t.Fatalf("stats %+v", st)
	}
	if bodies := e.Bodies(); len(bodies) != 2 || string(bodies[0]) != b1 || string(bodies[1]) != b2 {
		t.Fatalf("recorded bodies %q", bodies)
	}
	e.Restart()
	_, r3 := post(t, e, PathChat, b2)
	if c := r3["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64); c != 0 {
		t.Fatalf("cached after restart: %v", c)
	}
	if e.Stats().Restarts != 1 {
		t.Fatal("restart not counted")
	}
}

func TestFullyCachedPromptStillComputesLastBlock(t *testing.T) {
	e := startEngine(t, Config{BlockTokens: 16})
	body := `{"prompt":"` + strings.Repeat("abcd", 64) + `","max_tokens":1}` // exactly 4 blocks
	post(t, e, PathCompletions, body)
	_, r := post(t, e, PathCompletions, body)
	if c := r["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64); c != 48 {
		t.Fatalf("cached_tokens = %v, want 48", c)
	}
}

func TestCacheCapacityEvicts(t *testing.T) {
	e := startEngine(t, Config{BlockTokens: 16, CacheTokens: 64}) // 4 blocks
	a := `{"prompt":"` + strings.Repeat("aaaa", 80) + `","max_tokens":1}`
	b := `{"prompt":"` + strings.Repeat("bbbb", 80) + `","max_tokens":1}`
	post(t, e, PathCompletions, a)
	post(t, e, PathCompletions, b) // evicts all of a's blocks
	_, r := post(t, e, PathCompletions, a)
	if c := r["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64); c != 0 {
		t.Fatalf("evicted prompt still cached: %v", c)
	}
	if n := e.Stats().CachedBlocks; n != 4 {
		t.Fatalf("cached blocks %d, want 4", n)
	}
}

// readSSE returns the data payloads of a stream, and the read error if the
// stream broke.
func readSSE(r io.Reader) ([]string, error) {
	var events []string
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return events, err
		}
		if strings.HasPrefix(line, "data: ") {
			events = append(events, strings.TrimSuffix(line[6:], "\n"))
			if events[len(events)-1] == "[DONE]" {
				return events, nil
			}
		} else if line != "\n" {
			return events, fmt.Errorf("bad SSE line %q", line)
		}
	}
}

func TestStreamFraming(t *testing.T) {
	e := startEngine(t, Config{})
	resp, err := http.Post(e.URL()+PathChat, "application/json", strings.NewReader(chatBody(true, 5, "hello there")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events, err := readSSE(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	// role, 5 tokens, usage, [DONE]
	if len(events) != 8 {
		t.Fatalf("%d events: %q", len(events), events)
	}
	var content strings.Builder
	for i, ev := range events[:7] {
		var c struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta struct {
					Role    string  `json:"role"`
					Content *string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %d %q: %v", i, ev, err)
		}
		if c.Object != "chat.completion.chunk" {
			t.Fatalf("event %d object %q", i, c.Object)
		}
		switch {
		case i == 0:
			if c.Choices[0].Delta.Role != "assistant" {
				t.Fatalf("first event %q", ev)
			}
		case i == 6:
			if len(c.Choices) != 0 || c.Usage == nil {
				t.Fatalf("usage event %q", ev)
			}
		default:
			content.WriteString(*c.Choices[0].Delta.Content)
			if (c.Choices[0].FinishReason != nil) != (i == 5) {
				t.Fatalf("finish_reason on event %d: %q", i, ev)
			}
		}
	}
	if content.Len() != 5*BytesPerToken {
		t.Fatalf("content %q", content.String())
	}
	if st := e.Stats(); st.OutputTokens != 5 || st.Running != 0 || st.Waiting != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCompletionsStreamNoUsage(t *testing.T) {
	e := startEngine(t, Config{})
	resp, err := http.Post(e.URL()+PathCompletions, "application/json", strings.NewReader(`{"prompt":"hi","stream":true,"max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events, err := readSSE(resp.Body)
	if err != nil || len(events) != 3 || !strings.Contains(events[0], `"object":"text_completion"`) || strings.Contains(events[1], "usage") {
		t.Fatalf("events %q, %v", events, err)
	}
}

func TestQueueingBeyondMaxSeqs(t *testing.T) {
	// Decoding takes ~forever at scale 1, so all three stay in the engine.
	e := startEngine(t, Config{MaxSeqs: 1, TimeScale: 1, DecodePerToken: time.Hour})
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Closing the engine below cuts these streams: their errors
			// are the expected outcome, not a failure.
			resp, err := http.Post(e.URL()+PathChat, "application/json", strings.NewReader(chatBody(true, 2, "x")))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	testkit.WaitUntil(t, "1 running and 2 waiting", func() bool {
		st := e.Stats()
		return st.Running == 1 && st.Waiting == 2
	})
	metrics := get(t, e, "/metrics")
	for _, want := range []string{`vllm:num_requests_running{model_name="mock",engine="mock"} 1`, `vllm:num_requests_waiting{model_name="mock",engine="mock"} 2`,
		"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:time_to_first_token_seconds_bucket"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q:\n%s", want, metrics)
		}
	}
	e.Close() // ends the sleeping sequences and their connections
	wg.Wait()
	// The sequences end on the engine's own goroutines, which may count
	// them out just after their connections closed.
	testkit.WaitUntil(t, "nothing running or waiting after close, busy time counted", func() bool {
		st := e.Stats()
		return st.Running == 0 && st.Waiting == 0 && st.BusyTime > 0
	})
}

func get(t *testing.T, e *Engine, path string) string {
	t.Helper()
	resp, err := http.Get(e.URL() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return string(b)
}

func TestValidationAndErrors(t *testing.T) {
	e := startEngine(t, Config{Models: []string{"a", "b"}})
	cases := []struct {
		path, body string
		code       int
	}{
		{PathChat, `{"messages":[{"role":"user","content":"x"}]`, 400},
		{PathChat, `[]`, 400},
		{PathChat, `{"messages":[]}`, 400},
		{PathChat, `{"messages":"hi"}`, 400},
		{PathChat, `{"messages":[{"content":"x"}]}`, 400},
		{PathChat, `{"messages":[{"role":"user","content":1}]}`, 400},
		{PathChat, `{"messages":[{"role":"user","content":"x"}],"max_tokens":0}`, 400},
		{PathChat, `{"messages":[{"role":"user","content":"x"}],"stream":"yes"}`, 400},
		{PathChat, `{"model":"c","messages":[{"role":"user","content":"x"}]}`, 404},
		{PathCompletions, `{"model":"b"}`, 400},
		{"/v1/nope", `{}`, 404},
		{PathChat, `{"model":"b","messages":[{"role":"user","content":"x"}],"max_completion_tokens":1}`, 200},
		{PathChat, `{"messages":[{"role":"user","content":"x"}],"max_tokens":1}`, 200}, // default model
	}
	for _, c := range cases {
		code, out := post(t, e, c.path, c.body)
		if code != c.code {
			t.Errorf("%s %s: status %d, want %d (%v)", c.path, c.body, code, c.code, out)
			continue
		}
		if code != 200 {
			er, ok := out["error"].(map[string]any)
			if !ok || er["message"] == "" || er["code"].(float64) != float64(code) {
				t.Errorf("error shape %v", out)
			}
		} else if out["model"] != "b" && out["model"] != "a" {
			t.Errorf("model %v", out["model"])
		}
	}
	if models := get(t, e, "/v1/models"); !strings.Contains(models, `"id":"a"`) || !strings.Contains(models, `"id":"b"`) {
		t.Fatalf("models %s", models)
	}
	get(t, e, "/health")
	e.SetFaults(Faults{ErrorRate: 1})
	code, out := post(t, e, PathChat, `{"model":"a","messages":[{"role":"user","content":"x"}]}`)
	if code != 500 || out["error"].(map[string]any)["type"] != "InternalServerError" {
		t.Fatalf("injected error: %d %v", code, out)
	}
	if st := e.Stats(); st.Errors != 1 || st.BadRequests != 10 {
		t.Fatalf("stats %+v", st)
	}
}

func TestKillMidStream(t *testing.T) {
	e := startEngine(t, Config{Faults: Faults{KillAfterChunks: 3}})
	resp, err := http.Post(e.URL()+PathChat, "application/json", strings.NewReader(chatBody(true, 10, "x")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events, err := readSSE(resp.Body)
	if err == nil || len(events) != 3 {
		t.Fatalf("events %q err %v: want 3 then a broken stream", events, err)
	}
	if e.Stats().Killed != 1 {
		t.Fatal("kill not counted")
	}
}

func TestDownUp(t *testing.T) {
	e := startEngine(t, Config{})
	addr := e.Addr()
	if err := e.Down(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("connection accepted while down")
	}
	if err := e.Up(); err != nil {
		t.Fatal(err)
	}
	if e.Addr() != addr {
		t.Fatalf("address moved %s -> %s", addr, e.Addr())
	}
	get(t, e, "/health")
}

func TestSlowStartDelaysHeaders(t *testing.T) {
	e := startEngine(t, Config{Faults: Faults{SlowStart: 50 * time.Millisecond}})
	start := time.Now()
	post(t, e, PathChat, chatBody(false, 1, "x"))
	// A lower bound only: the delay is a sleep, never shorter.
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("slow start not applied")
	}
}

func TestFastMode(t *testing.T) {
	e := startEngine(t, Config{Fast: true})
	code, out := post(t, e, PathChat, chatBody(false, 100, "x"))
	if code != 200 || out["object"] != "chat.completion" {
		t.Fatalf("%d %v", code, out)
	}
	// No cache, so no cached-token count: a 0 would tell a router in
	// front that every prefix it predicted was evicted.
	if u, ok := out["usage"].(map[string]any); !ok || u["prompt_tokens"] == nil || u["prompt_tokens_details"] != nil {
		t.Fatalf("fast usage %v", out["usage"])
	}
	resp, err := http.Post(e.URL()+PathChat, "application/json", strings.NewReader(chatBody(true, 100, "x")))
	if err != nil {
		t.Fatal(err)
	}
	events, err := readSSE(resp.Body)
	resp.Body.Close()
	if err != nil || events[len(events)-1] != "[DONE]" || !strings.Contains(events[len(events)-2], "usage") {
		t.Fatalf("fast stream %q %v", events, err)
	}
	if code, _ := post(t, e, PathChat, `{`); code != 400 {
		t.Fatalf("fast mode accepted malformed JSON: %d", code)
	}
	if st := e.Stats(); st.QueryTokens != 0 || st.Requests != 2 {
		t.Fatalf("fast stats %+v", st)
	}
}

// With priority on, a high-priority request arriving at a full engine
// takes the running normal sequence's slot at once; the normal one waits,
// then recomputes and finishes its stream whole, with no error.
func TestPriorityPreemptsRunningSequence(t *testing.T) {
	e := startEngine(t, Config{MaxSeqs: 1, Priority: true, TimeScale: 1, DecodePerToken: 20 * time.Millisecond})
	resp, err := http.Post(e.URL()+PathChat, "application/json", strings.NewReader(chatBody(true, 20, "a long answer")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil { // the first event: the normal one runs
		t.Fatal(err)
	}
	normal := make(chan []string, 1)
	go func() {
		ev, err := readSSE(br)
		if err != nil {
			t.Error(err)
		}
		normal <- ev
	}()
	high := strings.Replace(chatBody(false, 2, "urgent"), `"model":"mock"`, `"model":"mock","priority":-1`, 1)
	code, out := post(t, e, PathChat, high)
	if code != http.StatusOK || out["choices"] == nil {
		t.Fatalf("high: %d %v", code, out)
	}
	select {
	case <-normal:
		t.Fatal("the normal stream ended before the high-priority request that preempted it")
	default:
	}
	if st := e.Stats(); st.Preemptions != 1 {
		t.Fatalf("preemptions %d, want 1", st.Preemptions)
	}
	ev := <-normal
	tokens := 0
	for _, x := range ev {
		if strings.Contains(x, `"delta":{"content"`) {
			tokens++
		}
	}
	if tokens != 20 || ev[len(ev)-1] != "[DONE]" {
		t.Fatalf("normal stream after preemption: %d tokens, last %q", tokens, ev[len(ev)-1])
	}
	if !strings.Contains(get(t, e, "/metrics"), `vllm:num_preemptions_total{model_name="mock",engine="mock"} 1`) {
		t.Error("num_preemptions_total not 1")
	}
	// vLLM's field is an integer; anything else is refused.
	if _, out := post(t, e, PathChat, strings.Replace(chatBody(false, 1, "x"), `"model":"mock"`, `"model":"mock","priority":"high"`, 1)); out["error"] == nil {
		t.Fatal("a non-integer priority was accepted")
	}
}
