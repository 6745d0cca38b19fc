package edge

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/internal/testkit"
)

// TestHostileBodies: each hostile body gets a clear 4xx or is routed, and a
// normal request sent meanwhile is not held up.
func TestHostileBodies(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	s := startProxy(t, func(c *Config) { c.MaxBodyBytes = 4 << 20 }, b)
	msg := func(content string) string {
		return `{"model":"m","messages":[{"role":"user","content":` + content + `}]}`
	}
	cases := map[string]string{
		"nested 10k":       msg(strings.Repeat("[", 10000) + strings.Repeat("]", 10000)),
		"nested objects":   msg(strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000)),
		"huge array":       `{"model":"m","messages":[` + strings.Repeat(`{"role":"user","content":"x"},`, 50000) + `{"role":"user","content":"y"}]}`,
		"invalid utf8":     msg("\"\xff\xfe\xc3\x28 bad bytes\""),
		"nul bytes":        msg("\"a\x00b\""),
		"escaped nul":      msg(`"a\u0000b"`),
		"lone surrogate":   msg(`"\ud800 x"`),
		"duplicate keys":   `{"model":"a","model":"m","messages":[{"role":"user","role":"user","content":"x"}]}`,
		"10k digit number": `{"model":"m","x":` + strings.Repeat("9", 10000) + `,"messages":[{"role":"user","content":"x"}]}`,
		"huge exponent":    `{"model":"m","x":1e999999999,"messages":[{"role":"user","content":"x"}]}`,
		"long key":         `{"` + strings.Repeat("k", 100000) + `":1,"model":"m","messages":[{"role":"user","content":"x"}]}`,
		"many keys":        `{` + strings.Repeat(`"k":1,`, 100000) + `"model":"m","messages":[{"role":"user","content":"x"}]}`,
	}
	var wg sync.WaitGroup
	for name, body := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Post("http://"+s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 && (resp.StatusCode < 400 || resp.StatusCode >= 500 || !bytes.Contains(out, []byte(`"error"`))) {
				t.Errorf("%s: %d %s", name, resp.StatusCode, out)
			}
		}()
	}
	// Meanwhile a normal conversation is served.
	for i := 0; i < 10; i++ {
		if resp, out := post(t, s, "/v1/chat/completions", conversation(i, 1, false)); resp.StatusCode != 200 {
			t.Fatalf("normal request: %d %s", resp.StatusCode, out)
		}
	}
	wg.Wait()
	waitIdle(t, s)
}

func TestSlowlorisIsCut(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	// The head and the body have bounds of their own.
	s := startProxy(t, func(c *Config) { c.HeaderTimeout, c.ClientReadTimeout = 300*time.Millisecond, 600*time.Millisecond }, b)
	for _, partial := range []string{
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Ty",                                    // headers trickled
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"model\":\"m\",", // body trickled
	} {
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		conn.Write([]byte(partial))
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		out, err := io.ReadAll(conn)
		conn.Close()
		if err != nil {
			t.Fatalf("connection not cut by the server: %v", err)
		}
		if !strings.HasPrefix(string(out), "HTTP/1.1 408 ") || !strings.Contains(string(out), "X-Request-Id: ") {
			t.Fatalf("want a 408 with a request id, got %q", out)
		}
		if time.Since(start) > 4*time.Second {
			t.Fatal("slow client held the connection")
		}
	}
	if b.hits.Load() != 0 {
		t.Fatal("a partial request reached the backend")
	}
}

// TestCredentialsPassThroughAndStayPrivate: Authorization reaches the
// backend untouched and appears in no log, metric or admin answer.
func TestCredentialsPassThroughAndStayPrivate(t *testing.T) {
	t.Parallel()
	const secret = "sk-live-0123456789abcdef"
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&logs, &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b := newTestBackend(t, "a")
	s := startProxy(t, func(c *Config) { c.Logger = logger; c.AccessLog = true }, b)
	for _, path := range []string{"/v1/chat/completions", "/v1/embeddings", "/v1/models"} {
		req, _ := http.NewRequest("POST", "http://"+s.Addr()+path, strings.NewReader(conversation(1, 1, false)))
		if path == "/v1/models" {
			req, _ = http.NewRequest("GET", "http://"+s.Addr()+path, nil)
		}
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("OpenAI-Organization", "org-x")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	b.mu.Lock()
	for _, h := range b.hdrs {
		if !strings.Contains(h, "Authorization: Bearer "+secret) || !strings.Contains(strings.ToLower(h), "openai-organization: org-x") {
			t.Errorf("credentials altered: %q", h)
		}
	}
	b.mu.Unlock()
	for _, path := range []string{"/metrics", "/admin/state"} {
		r, err := client.Get("http://" + s.AdminAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if bytes.Contains(out, []byte(secret)) {
			t.Fatalf("%s shows the credential", path)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if bytes.Contains(logs.Bytes(), []byte(secret)) {
		t.Fatal("logs show the credential")
	}
	if !bytes.Contains(logs.Bytes(), []byte("route=chat")) || !bytes.Contains(logs.Bytes(), []byte("request_id=")) {
		t.Fatalf("no access log line: %s", logs.Bytes())
	}
	if bytes.Contains(logs.Bytes(), []byte("number 8")) {
		t.Fatal("logs show body content")
	}
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestMaxBlocksHoldsMemory: one million distinct long prompts through the
// in-process path leave the table at its bound and the heap within budget.
func TestMaxBlocksHoldsMemory(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("memory figures need a build without -race (make test runs it in the allocs step)")
	}
	// Alone in a process of its own: the heap then holds this test's
	// server and nothing of the tests before it (a stopped server stays
	// reachable for seconds through its admin listener's worker pool, and
	// each holds tens of MiB).
	t.Parallel()
	if !testkit.Isolate(t) {
		return
	}
	cfg := DefaultConfig()
	cfg.Backends = []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3", "http://127.0.0.1:4"}
	cfg.Table.MaxBlocks = 200_000
	// The table's bound alone: the resumer (on by default) would hold its
	// own budget besides, which canon's tests hold it to.
	cfg.Table.ResumeMemoBytes = 0
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Start from a clean heap: what New allocated and freed goes first.
	runtime.GC()
	runtime.GC()
	prefix := strings.Repeat("a long shared-looking prompt with distinct tail ", 20)
	body := make([]byte, 0, 2048)
	const n = 1_000_000
	var peak uint64
	var ms runtime.MemStats
	for i := 0; i < n; i++ {
		body = fmt.Appendf(body[:0], `{"model":"m","messages":[{"role":"user","content":"%d %s %d"}]}`, i, prefix, i)
		c := s.getCall()
		if err := s.plan(c, canon.Chat, body); err != nil {
			t.Fatal(err)
		}
		s.table.Touch(c.req.Chain, i&3, c.req.Now)
		s.putCall(c)
		if i%100_000 == 0 {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	st := s.table.Stats()
	if st.Blocks > st.Capacity || st.Blocks < cfg.Table.MaxBlocks*9/10 {
		t.Fatalf("table holds %d blocks, capacity %d", st.Blocks, st.Capacity)
	}
	if st.EvictedCapacity == 0 {
		t.Fatal("no capacity evictions counted")
	}
	// Budget: 200k blocks × ~70 bytes plus pools and runtime: 64 MiB.
	const budget = 64 << 20
	if ms.HeapInuse > budget || peak > budget {
		t.Fatalf("heap in use %d MiB (peak %d MiB), budget %d MiB", ms.HeapInuse>>20, peak>>20, budget>>20)
	}
	t.Logf("1M prompts: table %d/%d blocks, %d capacity evictions, heap in use %.1f MiB (peak %.1f MiB)",
		st.Blocks, st.Capacity, st.EvictedCapacity, float64(ms.HeapInuse)/(1<<20), float64(peak)/(1<<20))
}
