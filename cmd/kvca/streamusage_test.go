package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/internal/testkit"
)

// TestServeStreamUsage runs the real binary in front of a mock engine: a
// plain streamed request (the OpenAI SDKs' default, no stream_options)
// reaches the engine asking for usage; the client receives what the
// engine sends a client that did not ask, ids and timestamps aside (no
// usage event); and kvca's cache check holds the engine's cached-token
// count, as /admin/state and the access log show.
func TestServeStreamUsage(t *testing.T) {
	bin := kvcaBinary(t)
	e := testkit.Start(t, mock.New(mock.Config{Name: "e0", RecordBodies: true,
		PrefillOverhead: time.Millisecond, PrefillPerToken: time.Microsecond, DecodePerToken: time.Millisecond}))
	addr, admin := freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin, "serve", "--listen", addr, "--admin-listen", admin, "--backend", e.URL(),
		"--block-size", "64", "--access-log", "--log-format", "json", "--health-interval", "1h")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")} // no KVCA_* of the test's environment
	logs := &testkit.LogBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	testkit.WaitUntil(t, "kvca serve to be ready", func() bool {
		r, err := http.Get("http://" + addr + "/ready")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	})

	body := `{"model":"mock","max_tokens":6,"stream":true,"messages":[{"role":"system","content":"` +
		strings.Repeat("A long system prompt so the engine has whole blocks to cache. ", 8) + `"},{"role":"user","content":"count"}]}`
	post := func(base, rid string) string {
		t.Helper()
		req, err := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", rid)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %v %s", base, resp.StatusCode, err, b)
		}
		return string(b)
	}
	// The engine's answer to the client as it is, asked directly; then
	// through kvca, with the engine's cache warm from the first.
	direct := post(e.URL(), "direct")
	hitsBefore := e.Stats().HitTokens
	proxied := post("http://"+addr, "through-kvca")
	reported := int64(e.Stats().HitTokens - hitsBefore)

	bodies := e.Bodies()
	var sent struct {
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal(bodies[len(bodies)-1], &sent); err != nil || !sent.StreamOptions.IncludeUsage {
		t.Fatalf("the engine got %s: no include_usage (%v)", bodies[len(bodies)-1], err)
	}
	norm := regexp.MustCompile(`"id":"chatcmpl-e0-\d+"|"created":\d+`)
	if strings.Contains(direct, `"usage"`) {
		t.Fatalf("the engine sent usage unasked: %s", direct)
	}
	if a, b := norm.ReplaceAllString(direct, "_"), norm.ReplaceAllString(proxied, "_"); a != b {
		t.Fatalf("through kvca:\n%s\nasked directly:\n%s", proxied, direct)
	}
	if reported <= 0 {
		t.Fatalf("the engine found %d tokens cached for a prompt it has seen", reported)
	}

	// The access log's count and the cache check's.
	var line struct {
		Msg          string `json:"msg"`
		RequestID    string `json:"request_id"`
		EngineCached int64  `json:"engine_cached_tokens"`
	}
	testkit.WaitUntil(t, "the access log line", func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "request" && line.RequestID == "through-kvca" {
				return true
			}
		}
		return false
	})
	if line.EngineCached != reported {
		t.Fatalf("access log engine_cached_tokens %d, the engine reported %d", line.EngineCached, reported)
	}
	r, err := http.Get("http://" + admin + "/admin/state")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var st edge.State
	if err := json.NewDecoder(r.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if len(st.Backends) != 1 {
		t.Fatalf("state: %+v", st.Backends)
	}
	cc := st.Backends[0].CacheCheck
	if cc.Checks != 1 || cc.EngineCachedTokens != uint64(reported) {
		t.Fatalf("cache check %+v, want 1 check of %d engine-cached tokens", cc, reported)
	}
}
