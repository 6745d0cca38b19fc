//go:build linux

package edge

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kvca/kvca/apikeys"
	"github.com/kvca/kvca/internal/testkit"
)

// A deterministic engine for --stream-usage: its streamed answer depends
// on the request alone (no ids, no clocks), so that what the client
// receives through kvca can be held byte for byte against what the
// engine sends a client that did not ask for usage.

// usageEvents are the engine's events for a request: the content, then,
// when the request asked for usage, the usage event vLLM sends, then
// [DONE]. cached is the count of prompt tokens it reports cached.
func usageEvents(chat, asked bool, cached int) []string {
	obj, choice := "chat.completion.chunk", `{"index":0,"delta":{"content":"tok%d "},"logprobs":null,"finish_reason":null}`
	if !chat {
		obj, choice = "text_completion", `{"index":0,"text":"tok%d ","logprobs":null,"finish_reason":null}`
	}
	var evs []string
	for i := range 5 {
		evs = append(evs, fmt.Sprintf(`data: {"id":"x-1","object":%q,"created":1,"model":"m","choices":[`+choice+`]}`+"\n\n", obj, i))
	}
	if asked {
		evs = append(evs, fmt.Sprintf(`data: {"id":"x-1","object":%q,"created":1,"model":"m","choices":[],"usage":{"prompt_tokens":40,"total_tokens":45,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":%d}}}`+"\n\n", obj, cached))
	}
	return append(evs, "data: [DONE]\n\n")
}

// asksUsage reads a request body's stream_options.include_usage.
func asksUsage(t *testing.T, body []byte) bool {
	var v struct {
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Errorf("the engine got a body that is not JSON: %v: %q", err, body)
		return false
	}
	return v.StreamOptions != nil && v.StreamOptions.IncludeUsage
}

// usageEngine is a raw backend that streams usageEvents, framed as the
// request's X-Test-Framing says: chunked (cut at random places, events
// across chunks), length (Content-Length), close (until it closes), cut
// (chunked, the connection closed before the usage event).
type usageEngine struct {
	*rawBackend
	cached int
	mu     sync.Mutex
	rng    *rand.Rand
}

func newUsageEngine(t *testing.T, cached int) *usageEngine {
	e := &usageEngine{cached: cached, rng: rand.New(rand.NewPCG(uint64(cached), 11))}
	e.rawBackend = newRawBackend(t, func(r rawReq) rawAnswer {
		evs := usageEvents(strings.Contains(r.line(), "/chat/"), asksUsage(t, r.body), e.cached)
		body := strings.Join(evs, "")
		head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
		switch f := r.fields("x-test-framing"); {
		case len(f) == 0 || f[0] == "chunked":
			return rawAnswer{resp: head + "Transfer-Encoding: chunked\r\n\r\n" + e.chunked(body) + "0\r\n\r\n"}
		case f[0] == "length":
			return rawAnswer{resp: head + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body}
		case f[0] == "close":
			return rawAnswer{resp: head + "\r\n" + body, close: true}
		default: // cut
			return rawAnswer{resp: head + "Transfer-Encoding: chunked\r\n\r\n" + e.chunked(strings.Join(evs[:3], "")), close: true}
		}
	})
	return e
}

// chunked frames body as chunks of random sizes.
func (e *usageEngine) chunked(body string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for len(body) > 0 {
		n := 1 + e.rng.IntN(min(len(body), []int{1, 9, 80, 400}[e.rng.IntN(4)]))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	return b.String()
}

// engineCachedLine is an access log line's engine_cached_tokens.
type engineCachedLine struct {
	Msg          string `json:"msg"`
	RequestID    string `json:"request_id"`
	EngineCached int64  `json:"engine_cached_tokens"`
	Status       int    `json:"status"`
}

// engineCachedOf waits for request id's access log line.
func engineCachedOf(t *testing.T, logs *testkit.LogBuffer, id string) engineCachedLine {
	t.Helper()
	var got engineCachedLine
	testkit.WaitUntil(t, "the access log line of "+id, func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			var a engineCachedLine
			if json.Unmarshal([]byte(l), &a) == nil && a.Msg == "request" && a.RequestID == id {
				got = a
				return true
			}
		}
		return false
	})
	return got
}

// sameButOptions fails unless sent (what the engine got) is the client's
// body with stream_options asking for usage, everything else equal.
func sameButOptions(t *testing.T, client, sent []byte) {
	t.Helper()
	var a, b map[string]any
	if err := json.Unmarshal(client, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(sent, &b); err != nil {
		t.Fatalf("the engine got %q: %v", sent, err)
	}
	so, _ := b["stream_options"].(map[string]any)
	if so["include_usage"] != true {
		t.Fatalf("the engine got %s: no include_usage", sent)
	}
	want, _ := a["stream_options"].(map[string]any)
	if want == nil {
		want = map[string]any{}
	}
	want["include_usage"] = true
	if !reflect.DeepEqual(so, want) {
		t.Fatalf("stream_options %v, want %v", so, want)
	}
	delete(a, "stream_options")
	delete(b, "stream_options")
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("the engine got %s for %s: other members changed", sent, client)
	}
}

const streamedChat = `{"model":"m","messages":[{"role":"system","content":"You are the stream usage test's assistant, patient and brief."},{"role":"user","content":"count to five, then stop"}],"stream":true}`

// TestStreamUsageAskedAndRemoved: a plain streamed request (chat or
// completions, its body sent with a length or chunked, by an HTTP/1.1 or
// 1.0 client, over plain TCP or TLS) reaches the engine asking for usage,
// with a correct length; its answer, framed by the engine as chunks cut
// anywhere, with a length or until it closes, reaches the client without
// the usage event, byte for byte what the engine sends a client that did
// not ask; and the engine's cached-token count is checked and logged.
func TestStreamUsageAskedAndRemoved(t *testing.T) {
	t.Parallel()
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newUsageEngine(t, 32)
			logs := &testkit.LogBuffer{}
			s, d := startRawProxy(t, m, logs, func(c *Config) { c.Backends = []string{e.url("")} })
			completions := `{"model":"m","prompt":"count to five, then stop","max_tokens":5,"stream":true,"stream_options":{"continuous_usage_stats":false}}`
			n := 0
			for _, tc := range []struct {
				name, path, body, framing, proto string
				chunkedUpload                    bool
			}{
				{"chat", "/v1/chat/completions", streamedChat, "chunked", "1.1", false},
				{"completions, other stream_options kept", "/v1/completions", completions, "chunked", "1.1", false},
				{"answer with a length", "/v1/chat/completions", streamedChat, "length", "1.1", false},
				{"answer until close", "/v1/chat/completions", streamedChat, "close", "1.1", false},
				{"HTTP/1.0 client", "/v1/chat/completions", streamedChat, "chunked", "1.0", false},
				{"chunked upload", "/v1/chat/completions", streamedChat, "chunked", "1.1", true},
			} {
				for i := range 8 {
					n++
					rid := fmt.Sprintf("usage-%s-%d", strings.ReplaceAll(tc.name, " ", "-"), i)
					rid = strings.NewReplacer(",", "").Replace(rid)
					c := d.dial(t)
					req := fmt.Sprintf("POST %s HTTP/%s\r\nHost: x\r\nX-Request-Id: %s\r\nX-Test-Framing: %s\r\n", tc.path, tc.proto, rid, tc.framing)
					if tc.chunkedUpload {
						req += "Transfer-Encoding: chunked\r\n\r\n" + e.chunked(tc.body) + "0\r\n\r\n"
					} else {
						req += fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(tc.body), tc.body)
					}
					c.send(req)
					resp := c.read(false)
					got := e.next(t)
					if resp.status != 200 {
						t.Fatalf("%s: status %d: %s", tc.name, resp.status, resp.body)
					}
					sameButOptions(t, []byte(tc.body), got.body)
					if cl := got.fields("content-length"); len(cl) != 1 || cl[0] != strconv.Itoa(len(got.body)) {
						t.Fatalf("%s: Content-Length %v for a body of %d bytes", tc.name, cl, len(got.body))
					}
					want := strings.Join(usageEvents(tc.path == "/v1/chat/completions", false, e.cached), "")
					if string(resp.body) != want {
						t.Fatalf("%s: the client got\n%q\nwant\n%q", tc.name, resp.body, want)
					}
					if tc.proto == "1.1" && tc.framing != "close" {
						c.open() // the chunks ended cleanly: the connection serves on
					}
					if a := engineCachedOf(t, logs, rid); a.EngineCached != int64(e.cached) || a.Status != 200 {
						t.Fatalf("%s: logged %+v, want engine_cached_tokens %d", tc.name, a, e.cached)
					}
				}
			}
			testkit.WaitUntil(t, "every stream counted", func() bool {
				return metric(t, s, "kvca_stream_usage_removed_total") == float64(n)
			})
			if got := metric(t, s, "kvca_stream_usage_asked_total"); got != float64(n) {
				t.Fatalf("asked %v, want %d", got, n)
			}
			if got := metricSum(t, s, "kvca_backend_cache_checks_total"); got != float64(n) {
				t.Fatalf("%v cache checks, want %d", got, n)
			}
			waitIdle(t, s)
		})
	}
}

// TestStreamUsageLeftAlone: a stream that asked for usage itself, one
// that asked for continuous usage, a request that is not streamed, and
// every stream with --stream-usage off, reach the engine byte for byte
// as sent, and their answers reach the client whole.
func TestStreamUsageLeftAlone(t *testing.T) {
	t.Parallel()
	asked := strings.TrimSuffix(streamedChat, "}") + `,"stream_options":{"include_usage":true}}`
	continuous := strings.TrimSuffix(streamedChat, "}") + `,"stream_options":{"continuous_usage_stats":true}}`
	for _, tc := range []struct {
		name, body string
		off        bool
		cached     int64 // the access log's engine_cached_tokens
	}{
		{"asked by the client", asked, false, 7},
		{"continuous usage asked", continuous, false, -1},
		{"off", streamedChat, true, -1},
		{"off, asked by the client", asked, true, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newUsageEngine(t, 7)
			logs := &testkit.LogBuffer{}
			s, d := startRawProxy(t, edgeModes[0], logs, func(c *Config) {
				c.Backends = []string{e.url("")}
				c.StreamUsage = !tc.off
			})
			c := d.dial(t)
			c.send(fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: alone\r\nContent-Length: %d\r\n\r\n%s", len(tc.body), tc.body))
			resp := c.read(false)
			got := e.next(t)
			if string(got.body) != tc.body {
				t.Fatalf("the engine got %q, want %q", got.body, tc.body)
			}
			want := strings.Join(usageEvents(true, asksUsage(t, []byte(tc.body)), e.cached), "")
			if resp.status != 200 || string(resp.body) != want {
				t.Fatalf("the client got %d %q, want %q", resp.status, resp.body, want)
			}
			if a := engineCachedOf(t, logs, "alone"); a.EngineCached != tc.cached {
				t.Fatalf("engine_cached_tokens %d, want %d", a.EngineCached, tc.cached)
			}
			if metric(t, s, "kvca_stream_usage_asked_total") != 0 || metric(t, s, "kvca_stream_usage_removed_total") != 0 {
				t.Fatal("a stream counted as asked")
			}
			waitIdle(t, s)
		})
	}
}

// TestStreamUsageBrokenStream: an engine that dies before the usage
// event leaves the client with the events it sent and kvca's error
// event, no last chunk, and the connection closed, as without the edit.
func TestStreamUsageBrokenStream(t *testing.T) {
	t.Parallel()
	e := newUsageEngine(t, 3)
	s, d := startRawProxy(t, edgeModes[0], nil, func(c *Config) { c.Backends = []string{e.url("")} })
	c := d.dial(t)
	c.send(fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Test-Framing: cut\r\nContent-Length: %d\r\n\r\n%s", len(streamedChat), streamedChat))
	h := c.ReadHead()
	if h.Status != 200 || h.Header.Get("Transfer-Encoding") != "chunked" {
		t.Fatalf("head %q", h.Raw)
	}
	raw := string(c.ReadToClose())
	var body strings.Builder
	for raw != "" {
		size, rest, ok := strings.Cut(raw, "\r\n")
		n, err := strconv.ParseInt(size, 16, 64)
		if !ok || err != nil || n == 0 || len(rest) < int(n)+2 || rest[n:n+2] != "\r\n" {
			t.Fatalf("not whole chunks: %q", raw)
		}
		body.WriteString(rest[:n])
		raw = rest[n+2:]
	}
	want := strings.Join(usageEvents(true, false, 0)[:3], "") + string(sseBrokenEvent)
	if body.String() != want {
		t.Fatalf("the client got %q, want %q", body.String(), want)
	}
	waitIdle(t, s)
}

// TestStreamUsageChargesTheTenant: a tenant's plain stream is charged the
// tokens its engine reports (40 prompt, 5 completion) rather than an
// estimate, the tenant alone (the cache check off) making kvca ask; with
// --stream-usage off it is charged the estimate.
func TestStreamUsageChargesTheTenant(t *testing.T) {
	t.Parallel()
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("off=%v", off), func(t *testing.T) {
			t.Parallel()
			keys := filepath.Join(t.TempDir(), "keys")
			writeKeys(t, keys, apikeys.Line([]byte("sk-alpha-0123456789"), "alpha", 0, 100000))
			e := newUsageEngine(t, 4)
			s, d := startRawProxy(t, edgeModes[0], nil, func(c *Config) {
				c.Backends = []string{e.url("")}
				c.APIKeys = keys
				c.Routing.CacheCheck = false
				c.StreamUsage = !off
			})
			c := d.dial(t)
			c.send(fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-alpha-0123456789\r\nContent-Length: %d\r\n\r\n%s", len(streamedChat), streamedChat))
			resp := c.read(false)
			if want := strings.Join(usageEvents(true, false, 0), ""); resp.status != 200 || string(resp.body) != want {
				t.Fatalf("the client got %d %q", resp.status, resp.body)
			}
			if got := e.next(t); asksUsage(t, got.body) == off {
				t.Fatalf("the engine got %q", got.body)
			}
			series := func(kind string) string { return `kvca_tenant_tokens_total{tenant="alpha",kind="` + kind + `"}` }
			testkit.WaitUntil(t, "the tenant charged", func() bool {
				return metric(t, s, series("prompt"))+metric(t, s, `kvca_tenant_estimated_tokens_total{tenant="alpha"}`) > 0
			})
			prompt, completion := metric(t, s, series("prompt")), metric(t, s, series("completion"))
			estimated := metric(t, s, `kvca_tenant_estimated_tokens_total{tenant="alpha"}`)
			if !off && (prompt != 40 || completion != 5 || estimated != 0) {
				t.Fatalf("charged %v prompt, %v completion, %v estimated; want the engine's 40 and 5", prompt, completion, estimated)
			}
			if off && (prompt != 0 || completion != 0 || estimated == 0) {
				t.Fatalf("with --stream-usage off: charged %v prompt, %v completion, %v estimated; want an estimate", prompt, completion, estimated)
			}
			waitIdle(t, s)
		})
	}
}
