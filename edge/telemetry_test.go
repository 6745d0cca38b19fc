package edge

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/internal/testkit"
)

func TestEngineTelemetryWired(t *testing.T) {
	t.Parallel()
	e := startEngine(t, mock.Config{Name: "e0", CacheTokens: 1 << 16})
	plain := newTestBackend(t, "plain") // answers /metrics with no exposition: off
	s := startProxy(t, func(c *Config) {
		c.Backends = []string{e.URL(), plain.url()}
		c.Telemetry.EngineMetrics = true
		c.Telemetry.EngineMetricsInterval = 20 * time.Millisecond
		c.Telemetry.BackendCacheTokens = []int64{0, 4096}
		c.HealthInterval = time.Hour
	})
	testkit.WaitUntil(t, "both backends' telemetry", func() bool {
		st := s.State()
		return st.Backends[0].Engine != nil && st.Backends[0].Engine.Status == "on" &&
			st.Backends[1].Engine != nil && st.Backends[1].Engine.Status == "off"
	})
	st := s.State()
	if got := st.Backends[0].Engine; got.Source != "vllm" || got.CapacityTokens != 1<<16 || got.CapacityBlocks != (1<<16)*4/64 {
		t.Fatalf("engine state %+v", got)
	}
	// The backend without /metrics is bounded by --backend-cache-tokens.
	if got := st.Backends[1].Engine.CapacityBlocks; got != 4096*4/64 {
		t.Fatalf("configured capacity %d blocks", got)
	}
	// A restart of the engine resets its locations: generation 2.
	gen := s.table.Generation(0)
	e.Restart()
	testkit.WaitUntil(t, "the restart to be seen", func() bool { return s.table.Generation(0) == gen+1 })
	if got := s.State().Backends[0].Engine.Restarts; got != 1 {
		t.Fatalf("restarts %d", got)
	}
	body := scrape(t, s)
	for _, want := range []string{"kvca_engine_metrics_up{", "kvca_engine_restarts_total{", `kvca_table_evictions_total{reason="backend_capacity"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// One scrape of a busy machine may time out (status "error" until the
	// next): the state is read once a scrape has succeeded.
	var b0 map[string]any
	testkit.WaitUntil(t, "a successful scrape in /admin/state", func() bool {
		var doc map[string]any
		resp2, err := http.Get("http://" + s.AdminAddr() + "/admin/state")
		if err != nil {
			t.Fatal(err)
		}
		defer resp2.Body.Close()
		if err := json.NewDecoder(resp2.Body).Decode(&doc); err != nil {
			t.Fatal(err)
		}
		b0 = doc["backends"].([]any)[0].(map[string]any)["engine"].(map[string]any)
		return b0["status"] == "on"
	})
	if b0["restarts"] != 1.0 {
		t.Fatalf("admin state engine %v", b0)
	}
}
