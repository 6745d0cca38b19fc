package edge

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

func startProxy(t *testing.T, mod func(*Config), backends ...*testBackend) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.AdminListen = "127.0.0.1:0"
	cfg.HealthInterval = 200 * time.Millisecond
	cfg.Table.BlockSize = 64
	for _, b := range backends {
		cfg.Backends = append(cfg.Backends, b.url())
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return testkit.Serve(t, s)
}

var client = &http.Client{Timeout: 20 * time.Second}

func post(t *testing.T, s *Server, path, body string) (*http.Response, string) {
	t.Helper()
	resp, err := client.Post("http://"+s.Addr()+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// conversation builds the body of turn n (0-based) of conversation id.
func conversation(id, n int, stream bool) string {
	msgs := []map[string]any{{"role": "system", "content": "You are a helpful assistant for the kvca test suite. Answer in one short sentence, always."}}
	for i := 0; i <= n; i++ {
		msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("conversation %d question %d: tell me something about the number %d please", id, i, i*7+id)})
		if i < n {
			msgs = append(msgs, map[string]any{"role": "assistant", "content": fmt.Sprintf("answer %d for conversation %d is that it is a number", i, id)})
		}
	}
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs, "stream": stream, "temperature": 0.5})
	return string(b)
}

func backendOf(resp *http.Response) string { return resp.Header.Get("X-Backend") }

// waitIdle waits until every backend's load (active requests, blocks in
// prefill) is released.
func waitIdle(t *testing.T, s *Server) {
	t.Helper()
	testkit.WaitUntil(t, "every backend's load and admission slots released", func() bool {
		for _, b := range s.fleet().sched.Backends {
			if b.Active() != 0 || b.Prefill() != 0 || s.adm.Inflight(b.Index) != 0 {
				return false
			}
		}
		return true
	})
}

func TestExactBytesForwarded(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	s := startProxy(t, nil, b)
	body := "{ \"messages\" : [ {\"role\":\"user\",\"content\":\"caf\\u00e9 \\/ spaced   out\"} ],\n\"model\":\"m\" , \"model\":\"m\"}"
	resp, out := post(t, s, "/v1/chat/completions", body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	got := b.received()
	if len(got) != 1 || string(got[0]) != body {
		t.Fatalf("backend got %q, want %q", got, body)
	}
	b.mu.Lock()
	h := b.hdrs[0]
	b.mu.Unlock()
	if !strings.Contains(h, "X-Forwarded-For: 127.0.0.1") {
		t.Fatalf("no X-Forwarded-For in %q", h)
	}
	waitIdle(t, s)
}

func TestConversationsStickAndFirstTurnsSpread(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"kvca", "cost", "kvca-cost"} {
		t.Run(policy, func(t *testing.T) {
			bs := []*testBackend{newTestBackend(t, "a"), newTestBackend(t, "b"), newTestBackend(t, "c"), newTestBackend(t, "d")}
			s := startProxy(t, func(c *Config) { c.Routing.Policy = policy }, bs...)
			const convs, turns = 24, 4
			home := map[int]string{}
			firsts := map[string]int{}
			for turn := 0; turn < turns; turn++ {
				for id := 0; id < convs; id++ {
					resp, out := post(t, s, "/v1/chat/completions", conversation(id, turn, false))
					if resp.StatusCode != 200 {
						t.Fatalf("status %d: %s", resp.StatusCode, out)
					}
					// Released just after the answer's last byte: the next
					// request must not find this one's load still counted.
					waitIdle(t, s)
					be := backendOf(resp)
					if turn == 0 {
						home[id] = be
						firsts[be]++
					} else if be != home[id] {
						t.Fatalf("conversation %d turn %d went to %s, its prefix is on %s", id, turn, be, home[id])
					}
				}
			}
			if policy == "kvca" {
				// Idle backends take turns: first turns spread evenly.
				for _, b := range bs {
					if firsts[b.name] != convs/len(bs) {
						t.Fatalf("first turns not spread evenly: %v", firsts)
					}
				}
			}
			waitIdle(t, s)
		})
	}
}

func TestStreamingIsIncremental(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	b.gate = make(chan struct{})
	b.events = 3
	s := startProxy(t, nil, b)
	resp, err := client.Post("http://"+s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(conversation(1, 0, true)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	// The backend sends event i+1 only after we have read event i: if the
	// proxy buffered the response, this would never complete.
	for i := 0; i < 3; i++ {
		line, err := readEvent(r)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if !strings.Contains(line, fmt.Sprintf("tok%d", i)) {
			t.Fatalf("event %d: %q", i, line)
		}
		if i < 2 {
			b.gate <- struct{}{}
		}
	}
	if line, err := readEvent(r); err != nil || line != "data: [DONE]" {
		t.Fatalf("end: %q %v", line, err)
	}
	waitIdle(t, s)
}

func readEvent(r *bufio.Reader) (string, error) {
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimSpace(line)
		if line != "" {
			return line, nil
		}
	}
}

func TestBadBodies(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	s := startProxy(t, nil, b)
	cases := map[string]string{
		"not json":          `{"model":`,
		"array":             `[1,2]`,
		"no messages":       `{"model":"m"}`,
		"messages string":   `{"model":"m","messages":"hi"}`,
		"empty messages":    `{"model":"m","messages":[]}`,
		"message not obj":   `{"model":"m","messages":[1]}`,
		"role missing":      `{"model":"m","messages":[{"content":"x"}]}`,
		"trailing garbage":  `{"model":"m","messages":[{"role":"user","content":"x"}]} x`,
		"bad number":        `{"model":"m","messages":[{"role":"user","content":"x"}],"n":+1}`,
		"nan":               `{"model":"m","messages":[{"role":"user","content":"x"}],"x":NaN}`,
		"raw newline":       "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\nb\"}]}",
		"raw tab in user":   "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"user\":\"a\tb\"}",
		"deep":              `{"model":"m","messages":[{"role":"user","content":` + strings.Repeat("[", 400) + strings.Repeat("]", 400) + `}]}`,
		"empty":             ``,
		"completions no pr": `{"model":"m"}`,
	}
	for name, body := range cases {
		path := "/v1/chat/completions"
		if strings.HasPrefix(name, "completions") {
			path = "/v1/completions"
		}
		resp, out := post(t, s, path, body)
		if resp.StatusCode != 400 {
			t.Fatalf("%s: status %d: %s", name, resp.StatusCode, out)
		}
		var e struct {
			Error struct{ Message, Type, Code string }
		}
		if err := json.Unmarshal([]byte(out), &e); err != nil || e.Error.Message == "" || e.Error.Type != "invalid_request_error" {
			t.Fatalf("%s: not an OpenAI error: %s", name, out)
		}
		// The next request still works.
		if resp, out := post(t, s, "/v1/chat/completions", conversation(1, 0, false)); resp.StatusCode != 200 {
			t.Fatalf("after %s: %d %s", name, resp.StatusCode, out)
		}
	}
	if n := b.hits.Load(); n != int64(len(cases)) {
		t.Fatalf("backend saw %d requests, want only the %d good ones", n, len(cases))
	}
	waitIdle(t, s)
}

func TestTooLarge(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	s := startProxy(t, func(c *Config) { c.MaxBodyBytes = 1000 }, b)
	resp, out := post(t, s, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"`+strings.Repeat("x", 5000)+`"}]}`)
	if resp.StatusCode != 413 || !strings.Contains(out, "request_too_large") {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	if b.hits.Load() != 0 {
		t.Fatal("oversized body reached the backend")
	}
}

func TestAbandonedStreamsReleaseLoad(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	b.gate = make(chan struct{})
	// Enough events that writes to a gone client must fail: the first
	// write after the client's close still succeeds (its RST is on the way),
	// and a stream that ends within it would look complete.
	b.events = 100
	s := startProxy(t, nil, b)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", s.Addr())
			if err != nil {
				t.Error(err)
				return
			}
			body := conversation(i, 0, true)
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			r := bufio.NewReader(conn)
			// Read up to the first event, then walk away.
			for {
				line, err := r.ReadString('\n')
				if err != nil || strings.HasPrefix(line, "data:") {
					break
				}
			}
			conn.Close()
		}()
	}
	wg.Wait()
	// Let the backend try to send more: the proxy's writes to the gone
	// clients fail, which must abort upstream and release the load.
	deadline := time.After(5 * time.Second)
	for done := false; !done; {
		select {
		case b.gate <- struct{}{}:
		case <-deadline:
			done = true
		case <-time.After(50 * time.Millisecond):
			done = s.fleet().sched.Backends[0].Active() == 0
		}
	}
	waitIdle(t, s)
	if s.m.disconnects.Get() == 0 {
		t.Fatal("no client disconnect counted")
	}
}

func TestDeadBackendCausesNoFailure(t *testing.T) {
	t.Parallel()
	live1, live2 := newTestBackend(t, "a"), newTestBackend(t, "b")
	dead := newTestBackend(t, "dead")
	deadURL := dead.url()
	dead.close()
	s := startProxy(t, func(c *Config) {
		c.Backends = []string{live1.url(), deadURL, live2.url()}
		c.HealthInterval = time.Hour // only passive health and retries here
		c.Routing.Policy = "kvca"    // sequential first turns take turns, so some pick dead
	})
	for i := 0; i < 30; i++ {
		resp, out := post(t, s, "/v1/chat/completions", conversation(i, i%3, i%2 == 0))
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, out)
		}
	}
	if s.fleet().sched.Backends[1].Healthy() {
		t.Fatal("dead backend not ejected")
	}
	waitIdle(t, s)
}

func TestAllBackendsDown(t *testing.T) {
	t.Parallel()
	dead := newTestBackend(t, "dead")
	url := dead.url()
	dead.close()
	s := startProxy(t, func(c *Config) { c.Backends = []string{url} })
	resp, out := post(t, s, "/v1/chat/completions", conversation(1, 0, false))
	if resp.StatusCode != 502 && resp.StatusCode != 503 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	testkit.WaitUntil(t, "the dead backend ejected", func() bool { return !s.fleet().sched.Backends[0].Healthy() })
	resp, out = post(t, s, "/v1/chat/completions", conversation(1, 0, false))
	if resp.StatusCode != 503 || !strings.Contains(out, "no_healthy_backend") {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	if st := readyStatus(t, s); st != 503 {
		t.Fatalf("/ready %d with no healthy backend", st)
	}
	waitIdle(t, s)
}

func TestHeaderTimeoutGives504(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "slow")
	b.hold = make(chan struct{}) // no answer before the test ends
	t.Cleanup(func() { close(b.hold) })
	s := startProxy(t, func(c *Config) { c.UpstreamHeaderTimeout = 100 * time.Millisecond }, b)
	resp, out := post(t, s, "/v1/chat/completions", conversation(1, 0, false))
	if resp.StatusCode != 504 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	waitIdle(t, s)
	if s.table.Stats().Blocks != 0 {
		t.Fatal("a timed-out request was learned")
	}
}

func TestVacuumReclaimsIdleLocations(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	s := startProxy(t, func(c *Config) { c.Table.TTL = 150 * time.Millisecond }, b)
	for i := 0; i < 5; i++ {
		post(t, s, "/v1/chat/completions", conversation(i, 2, false))
	}
	if s.table.Stats().Blocks == 0 {
		t.Fatal("nothing learned")
	}
	testkit.WaitUntil(t, "the vacuum to reclaim every block", func() bool { return s.table.Stats().Blocks == 0 })
	if st := s.table.Stats(); st.EvictedExpired == 0 || st.Locations != 0 {
		t.Fatalf("stats after vacuum: %+v", st)
	}
}

func TestErrorsNotLearned(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	b.status.Store(500)
	s := startProxy(t, nil, b)
	resp, out := post(t, s, "/v1/chat/completions", conversation(1, 1, false))
	if resp.StatusCode != 500 || !strings.Contains(out, "backend says no") {
		t.Fatalf("status %d: %s (want the backend's answer unchanged)", resp.StatusCode, out)
	}
	if s.table.Stats().Blocks != 0 {
		t.Fatal("a failed response was learned")
	}
	waitIdle(t, s)
}

func TestModelsAndPassthroughAndAdmin(t *testing.T) {
	t.Parallel()
	a, b := newTestBackend(t, "a"), newTestBackend(t, "b")
	s := startProxy(t, nil, a, b)
	r, err := client.Get("http://" + s.Addr() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Object string
		Data   []struct{ ID string }
	}
	json.NewDecoder(r.Body).Decode(&list)
	r.Body.Close()
	ids := map[string]bool{}
	for _, m := range list.Data {
		ids[m.ID] = true
	}
	if list.Object != "list" || len(list.Data) != 3 || !ids["m"] || !ids["only-a"] || !ids["only-b"] {
		t.Fatalf("models: %+v", list)
	}
	resp, out := post(t, s, "/v1/embeddings", `{"input":"x"}`)
	if resp.StatusCode != 200 || !strings.Contains(out, "hello") {
		t.Fatalf("passthrough: %d %s", resp.StatusCode, out)
	}
	post(t, s, "/v1/chat/completions", conversation(3, 1, false))
	r, err = client.Get("http://" + s.AdminAddr() + "/admin/state")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(r.Body)
	r.Body.Close()
	var st map[string]any
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	backs := st["backends"].([]any)
	if len(backs) != 2 {
		t.Fatalf("state: %s", raw)
	}
	for _, k := range []string{"url", "endpoint_id", "generation", "healthy", "active", "prefill_blocks", "load"} {
		if _, ok := backs[0].(map[string]any)[k]; !ok {
			t.Fatalf("state backend lacks %q: %s", k, raw)
		}
	}
	tbl := st["table"].(map[string]any)
	if tbl["blocks"].(float64) == 0 || tbl["capacity"].(float64) == 0 || tbl["locations"].(float64) == 0 {
		t.Fatalf("state table: %s", raw)
	}
	r, err = client.Get("http://" + s.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = io.ReadAll(r.Body)
	r.Body.Close()
	for _, name := range []string{
		`kvca_requests_total{route="chat",phase="followup"}`, "kvca_request_duration_seconds_bucket",
		"kvca_upstream_first_byte_seconds_bucket", `kvca_routed_blocks_total{kind="novel"}`,
		"kvca_backend_active_requests", "kvca_backend_prefill_blocks", "kvca_backend_healthy",
		"kvca_table_blocks", "kvca_table_evictions_total", "kvca_upstream_errors_total",
		"kvca_client_disconnects_total", "kvca_bad_requests_total",
	} {
		if !bytes.Contains(raw, []byte(name)) {
			t.Fatalf("metrics lack %s", name)
		}
	}
	waitIdle(t, s)
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	s := startProxy(t, nil, b)
	req, _ := http.NewRequest("POST", "http://"+s.Addr()+"/v1/chat/completions", strings.NewReader(conversation(1, 0, false)))
	req.Header.Set("X-Request-Id", "client-chosen-42")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got := resp.Header.Get("X-Request-Id"); got != "client-chosen-42" {
		t.Fatalf("response id %q", got)
	}
	resp2, _ := post(t, s, "/v1/chat/completions", conversation(2, 0, false))
	gen := resp2.Header.Get("X-Request-Id")
	if len(gen) != 16 {
		t.Fatalf("generated id %q", gen)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !strings.Contains(b.hdrs[0], "X-Request-Id: client-chosen-42") || !strings.Contains(b.hdrs[1], "X-Request-Id: "+gen) {
		t.Fatalf("ids not forwarded: %q", b.hdrs)
	}
}

// scriptedStream is a raw-socket backend: it answers each POST with a
// streamed (chunked SSE) head, says so on head, waits for gate, then
// sends one event and ends; anything else gets 404.
func scriptedStream(t *testing.T) (url string, head chan struct{}, gate chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	head, gate = make(chan struct{}, 4), make(chan struct{})
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				if req.Method != "POST" {
					io.WriteString(conn, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
					return
				}
				io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
				head <- struct{}{}
				select {
				case <-gate:
				case <-time.After(10 * time.Second):
					return
				}
				ev := "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"
				fmt.Fprintf(conn, "%x\r\n%s\r\n0\r\n\r\n", len(ev), ev)
			}()
		}
	}()
	return "http://" + ln.Addr().String(), head, gate
}

// TestPrefillReleasedAfterPrefill: a streaming backend answers headers
// before it prefills; the novel-block load stays reserved until the first
// body byte (by default) or goes at the headers (--prefill-release headers).
func TestPrefillReleasedAfterPrefill(t *testing.T) {
	t.Parallel()
	for _, atHeaders := range []bool{false, true} {
		t.Run(fmt.Sprintf("at_headers=%v", atHeaders), func(t *testing.T) {
			url, head, gate := scriptedStream(t)
			s := startProxy(t, func(c *Config) {
				c.PrefillAtHeaders = atHeaders
				c.HealthInterval = 0
				c.Backends = []string{url + "#m"}
			})
			conn, err := net.Dial("tcp", s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			body := conversation(1, 2, true)
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			<-head
			// kvca relays the head as soon as it has it: once the client
			// has it, kvca has acted on it.
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			be := s.fleet().sched.Backends[0]
			if got, want := be.Prefill() == 0, atHeaders; got != want {
				t.Fatalf("prefill released at headers: %v, want %v (prefill %d)", got, want, be.Prefill())
			}
			if be.Active() != 1 {
				t.Fatalf("active %d during the stream", be.Active())
			}
			close(gate)
			if _, err := io.ReadAll(resp.Body); err != nil {
				t.Fatal(err)
			}
			waitIdle(t, s)
		})
	}
}

// TestPredictedLocation: with --predict-ttl, a request that extends one
// still waiting for its answer follows it; without, it goes by load.
func TestPredictedLocation(t *testing.T) {
	t.Parallel()
	for _, predict := range []time.Duration{0, 5 * time.Second} {
		t.Run(predict.String(), func(t *testing.T) {
			t.Parallel()
			a, b := newTestBackend(t, "a"), newTestBackend(t, "b")
			// Both requests stay in flight until both have been routed:
			// the second is routed knowing only what the first predicted.
			hold := make(chan struct{})
			a.hold, b.hold = hold, hold
			s := startProxy(t, func(c *Config) { c.Table.PredictTTL = predict }, a, b)
			backends := make(chan string, 2)
			send := func(turn int) { // off the test goroutine: no t.Fatal
				resp, err := client.Post("http://"+s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(conversation(1, turn, false)))
				if err != nil {
					backends <- err.Error()
					return
				}
				resp.Body.Close()
				backends <- backendOf(resp)
			}
			go send(1)
			testkit.WaitUntil(t, "first request at a backend", func() bool { return a.hits.Load()+b.hits.Load() == 1 })
			go send(2)
			testkit.WaitUntil(t, "second request at a backend", func() bool { return a.hits.Load()+b.hits.Load() == 2 })
			close(hold)
			first, second := <-backends, <-backends
			if same := first == second; same != (predict > 0) {
				t.Fatalf("predict=%v: requests on %s and %s", predict, first, second)
			}
			waitIdle(t, s)
		})
	}
}
