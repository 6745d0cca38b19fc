package edge

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvca/kvca/internal/testkit"
)

func TestModelAwareRouting(t *testing.T) {
	t.Parallel()
	a, b, c := newTestBackend(t, "a"), newTestBackend(t, "b"), newTestBackend(t, "c")
	s := startProxy(t, func(cfg *Config) {
		// c's models are fixed by the flag; a and b are discovered.
		cfg.Backends = []string{a.url(), b.url(), c.url() + "#fixed-model,m"}
		cfg.Routing.Policy = "kvca" // first turns take turns over the backends serving "m"
	})
	testkit.WaitUntil(t, "models discovered", func() bool {
		idx := s.models.Load()
		return idx != nil && idx.wild.Empty()
	})
	body := func(model string, i int) string {
		return strings.Replace(conversation(i, 0, false), `"model":"m"`, `"model":"`+model+`"`, 1)
	}
	for i := 0; i < 6; i++ {
		for model, want := range map[string]string{"only-a": "a", "only-b": "b", "fixed-model": "c"} {
			resp, out := post(t, s, "/v1/chat/completions", body(model, i))
			if resp.StatusCode != 200 || backendOf(resp) != want {
				t.Fatalf("model %s went to %q (%d %s)", model, backendOf(resp), resp.StatusCode, out)
			}
		}
	}
	seen := map[string]bool{}
	for i := 0; i < 9; i++ {
		resp, _ := post(t, s, "/v1/chat/completions", body("m", 100+i))
		seen[backendOf(resp)] = true
	}
	if len(seen) != 3 {
		t.Fatalf("model served by all went only to %v", seen)
	}
	resp, out := post(t, s, "/v1/chat/completions", body("nope", 1))
	if resp.StatusCode != 404 || !strings.Contains(out, "model_not_found") {
		t.Fatalf("unknown model: %d %s", resp.StatusCode, out)
	}
	// Passthrough requests are kept to their model's backends too.
	resp, out = post(t, s, "/v1/embeddings", `{"model":"only-b","input":"x"}`)
	if resp.StatusCode != 200 || backendOf(resp) != "b" {
		t.Fatalf("passthrough model: %q %d %s", backendOf(resp), resp.StatusCode, out)
	}
	if resp, _ := post(t, s, "/v1/embeddings", `{"model":"nope","input":"x"}`); resp.StatusCode != 404 {
		t.Fatalf("passthrough unknown model: %d", resp.StatusCode)
	}
	waitIdle(t, s)
}

func TestResponsesRouted(t *testing.T) {
	t.Parallel()
	bs := []*testBackend{newTestBackend(t, "a"), newTestBackend(t, "b"), newTestBackend(t, "c")}
	// No health probes: on an overloaded test machine one timing out would
	// eject a backend and move its conversations, which is right but not
	// what this test is about.
	s := startProxy(t, func(c *Config) { c.HealthInterval = 0 }, bs...)
	// Each conversation differs from the others from its first user
	// message on: with "x" repeated id+40 times, conversation 0's prefix
	// was a prefix of all the others', and a backend holding another
	// conversation tied with its home on the longest match.
	turn := func(id, n int) string {
		items := []string{`{"role":"user","content":"conversation ` + fmt.Sprint(id) + `: ` + strings.Repeat("x", 40) + ` first question"}`}
		for i := 1; i <= n; i++ {
			items = append(items, `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"an answer that is long enough to fill blocks"}]}`,
				`{"role":"user","content":"follow-up question number `+strings.Repeat("y", i)+`"}`)
		}
		return `{"model":"m","instructions":"Answer briefly and precisely, citing sources.","input":[` + strings.Join(items, ",") + `],"max_output_tokens":20}`
	}
	home := map[int]string{}
	for n := 0; n < 3; n++ {
		for id := 0; id < 6; id++ {
			resp, out := post(t, s, "/v1/responses", turn(id, n))
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, out)
			}
			// The load of an answer is released just after its last byte
			// is written: the next request could find it still counted
			// and rightly go to an idle backend.
			waitIdle(t, s)
			if n == 0 {
				home[id] = backendOf(resp)
			} else if backendOf(resp) != home[id] {
				diag := ""
				for _, u := range s.fleet().ups {
					diag += fmt.Sprintf(" %s: connect %d timeout %d status %d busy %d;", u.b.Name,
						u.m.errors[errConnect].Get(), u.m.errors[errTimeout].Get(), u.m.errors[errStatus].Get(), u.m.errors[errBusy].Get())
				}
				t.Fatalf("responses conversation %d moved from %s to %s (upstream errors:%s)", id, home[id], backendOf(resp), diag)
			}
		}
	}
	if s.m.requests[routeResponses][1].Get() == 0 {
		t.Fatal("no responses follow-ups counted")
	}
	waitIdle(t, s)
}
