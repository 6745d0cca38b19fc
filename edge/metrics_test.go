package edge

import (
	"io"
	"strings"
	"testing"

	"github.com/kvca/kvca/internal/testkit"
)

// scrape is the proxy's /metrics, from its admin listener.
func scrape(t *testing.T, s *Server) string {
	t.Helper()
	resp, err := client.Get("http://" + s.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// /metrics: latency histograms reach half an hour, time to first token is
// recorded by route and a discovered model, answers are counted by status
// class, and the Go runtime, the process and the build are there.
func TestMetricsAnOperatorNeeds(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	s := startProxy(t, func(c *Config) { c.Version = "v9.9.9" }, b)
	testkit.WaitUntil(t, "models discovered", func() bool { idx := s.models.Load(); return idx != nil && idx.known })
	if resp, out := post(t, s, "/v1/chat/completions", conversation(1, 0, true)); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	if resp, _ := post(t, s, "/nowhere", "{}"); resp.StatusCode != 404 {
		t.Fatalf("404 expected, got %d", resp.StatusCode)
	}
	waitIdle(t, s)
	// An answer is counted once written, which may be just after the
	// client read it.
	var m string
	testkit.WaitUntil(t, "the 404 counted", func() bool {
		m = scrape(t, s)
		return strings.Contains(m, `kvca_responses_total{route="other",class="4xx"} 1`)
	})
	for _, want := range []string{
		`kvca_request_duration_seconds_bucket{route="chat",le="1800"}`,
		`kvca_upstream_first_byte_seconds_bucket{backend="` + s.fleet().sched.Backends[0].Name + `",le="1800"}`,
		`kvca_time_to_first_token_seconds_count{route="chat",model="m"} 1`,
		`kvca_responses_total{route="chat",class="2xx"} 1`,
		`kvca_responses_total{route="other",class="4xx"} 1`,
		`kvca_build_info{version="v9.9.9",goversion="go`,
		"\ngo_goroutines ",
		"\nprocess_open_fds ",
		"# TYPE kvca_time_to_first_token_seconds histogram",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
