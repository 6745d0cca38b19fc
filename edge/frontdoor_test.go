package edge

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvca/kvca/apikeys"
	"github.com/kvca/kvca/quota"
)

func writeKeys(t *testing.T, path string, lines ...string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func postKey(t *testing.T, s *Server, key, body string) (*http.Response, string) {
	t.Helper()
	h := map[string]string{}
	if key != "" {
		h["Authorization"] = "Bearer " + key
	}
	return postWith(t, s, body, h)
}

func errorCode(t *testing.T, out string) string {
	t.Helper()
	var e struct{ Error struct{ Code string } }
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatalf("not an OpenAI error: %q", out)
	}
	return e.Error.Code
}

// API keys: a missing or unknown key is refused with 401 in OpenAI's
// shape; a known one is served, and the backend sees kvca's own key,
// never the client's. A rotated file takes effect without a restart.
func TestAPIKeysAndBackendKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	writeKeys(t, keys, "# tenants", apikeys.Line([]byte("sk-alpha-0123456789"), "alpha", 0, 0))
	b := newTestBackend(t, "a")
	s := startProxy(t, func(c *Config) { c.APIKeys, c.BackendAPIKey = keys, "backend-secret" }, b)

	for _, tc := range []struct{ key, code string }{{"", "missing_api_key"}, {"sk-wrong", "invalid_api_key"}} {
		resp, out := postKey(t, s, tc.key, conversation(1, 0, false))
		if resp.StatusCode != 401 || errorCode(t, out) != tc.code || resp.Header.Get("X-Request-Id") == "" {
			t.Fatalf("key %q: %d %s", tc.key, resp.StatusCode, out)
		}
	}
	if b.hits.Load() != 0 {
		t.Fatal("a refused request reached the backend")
	}
	if resp, out := postKey(t, s, "sk-alpha-0123456789", conversation(1, 0, false)); resp.StatusCode != 200 {
		t.Fatalf("good key: %d %s", resp.StatusCode, out)
	}
	b.mu.Lock()
	h := b.hdrs[0]
	b.mu.Unlock()
	if !strings.Contains(h, "Authorization: Bearer backend-secret") || strings.Contains(h, "sk-alpha") {
		t.Fatalf("backend head: %q", h)
	}

	// Rotation: the new key works, the old one no longer does.
	writeKeys(t, keys, apikeys.Line([]byte("sk-beta-9876543210"), "alpha", 0, 0))
	if err := s.keys.Reload(); err != nil {
		t.Fatal(err)
	}
	if resp, _ := postKey(t, s, "sk-alpha-0123456789", conversation(2, 0, false)); resp.StatusCode != 401 {
		t.Fatalf("old key after rotation: %d", resp.StatusCode)
	}
	if resp, out := postKey(t, s, "sk-beta-9876543210", conversation(2, 0, false)); resp.StatusCode != 200 {
		t.Fatalf("new key after rotation: %d %s", resp.StatusCode, out)
	}
	waitIdle(t, s)
}

// Requests per minute: exactly rpm requests pass, the next gets 429 with
// Retry-After and OpenAI's rate-limit headers, and never reaches the
// backend; tokens are charged what the backend's usage says.
func TestQuotaAtItsBound(t *testing.T) {
	t.Parallel()
	keys := filepath.Join(t.TempDir(), "keys")
	writeKeys(t, keys, apikeys.Line([]byte("sk-alpha-0123456789"), "alpha", 3, 100000))
	b := newTestBackend(t, "a")
	s := startProxy(t, func(c *Config) { c.APIKeys = keys }, b)
	start := time.Now()
	for i := 0; i < 3; i++ {
		resp, out := postKey(t, s, "sk-alpha-0123456789", conversation(i, 0, false))
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, out)
		}
		if got := resp.Header.Get("X-Ratelimit-Limit-Requests"); got != "3" {
			t.Fatalf("x-ratelimit-limit-requests %q", got)
		}
		if got, want := resp.Header.Get("X-Ratelimit-Remaining-Requests"), string(rune('2'-i)); got != want {
			t.Fatalf("request %d: x-ratelimit-remaining-requests %q, want %q", i, got, want)
		}
	}
	resp, out := postKey(t, s, "sk-alpha-0123456789", conversation(3, 0, false))
	if resp.StatusCode != 429 || errorCode(t, out) != "rate_limit_exceeded" || resp.Header.Get("Retry-After") == "" ||
		resp.Header.Get("X-Ratelimit-Remaining-Requests") != "0" {
		t.Fatalf("over the bound: %d %v %s", resp.StatusCode, resp.Header, out)
	}
	if b.hits.Load() != 3 {
		t.Fatalf("backend got %d requests, want 3", b.hits.Load())
	}
	waitIdle(t, s)
	// The test backend reports 13 tokens (10 prompt + 3 completion) per
	// answer: three answers charged 39 of the 100000, which refill at
	// 100000 a minute meanwhile.
	tn, _ := s.keys.Lookup([]byte("sk-alpha-0123456789"))
	var d quota.Decision
	s.quota.Peek(tn, 0, &d)
	refill := int64(time.Since(start).Seconds()*100000/60) + 1
	if d.TokRemaining < 100000-39 || d.TokRemaining > 100000-39+refill {
		t.Fatalf("tokens remaining %d, want %d (+ at most %d refilled)", d.TokRemaining, 100000-39, refill)
	}
}

// Tracing: the backend receives a traceparent continuing the client's
// trace (same trace id, kvca's span), and spans reach the OTLP receiver.
func TestTraceContextReachesBackend(t *testing.T) {
	t.Parallel()
	var exports atomic.Int32
	recv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/v1/traces" {
			exports.Add(1)
		}
		w.WriteHeader(200)
	})}
	ln := listenLocal(t)
	go recv.Serve(ln)
	t.Cleanup(func() { recv.Close() })
	b := newTestBackend(t, "a")
	s := startProxy(t, func(c *Config) { c.Tracing.Endpoint = "http://" + ln.Addr().String() + "/v1/traces" }, b)
	const tid = "4bf92f3577b34da6a3ce929d0e0e4736"
	resp, out := postWith(t, s, conversation(1, 0, false), map[string]string{"traceparent": "00-" + tid + "-00f067aa0ba902b7-01"})
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	b.mu.Lock()
	h := b.hdrs[0]
	b.mu.Unlock()
	i := strings.Index(strings.ToLower(h), "traceparent: 00-"+tid+"-")
	if i < 0 || strings.Contains(h, "00f067aa0ba902b7") || strings.Count(strings.ToLower(h), "traceparent:") != 1 {
		t.Fatalf("backend head: %q", h)
	}
	waitIdle(t, s)
	ctx, cancel := contextTimeout(5 * time.Second)
	defer cancel()
	if err := s.tracer.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if exports.Load() == 0 {
		t.Fatal("no spans reached the OTLP receiver")
	}
}

// listenLocal listens on 127.0.0.1 at an ephemeral port.
func listenLocal(tb testing.TB) net.Listener {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return ln
}

func contextTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
