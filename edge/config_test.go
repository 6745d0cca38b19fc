package edge

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRestartAsksEachPart: a reload names every setting that changed but
// takes effect only at a restart, each part answering for its own; what a
// reload applies (the TTL, ε, the backends) is not named.
func TestRestartAsksEachPart(t *testing.T) {
	cur := DefaultConfig()
	cur.Backends = []string{"http://127.0.0.1:1"}
	if err := cur.Validate(); err != nil {
		t.Fatal(err)
	}
	next := cur
	next.Table.BlockSize = 512
	next.Table.TTL = time.Minute
	next.Routing.CacheCheck = !cur.Routing.CacheCheck
	next.Routing.AffinityEpsilon = 2
	next.Admission.QueueSize = 7
	next.Admission.QueueHolderWait = time.Second
	next.Tracing.Endpoint = "http://127.0.0.1:4318/v1/traces"
	next.Telemetry.EngineMetrics = !cur.Telemetry.EngineMetrics
	next.Listen = "127.0.0.1:9"
	next.StreamUsage = !cur.StreamUsage
	next.Backends = []string{"http://127.0.0.1:2"}
	got := restartOnly(cur, next)
	for _, want := range []string{"block-size", "cache-check", "queue-size", "queue-holder-wait", "otlp-endpoint", "engine-metrics", "listen", "stream-usage"} {
		if !slices.Contains(got, want) {
			t.Errorf("%q changed and is not named: %v", want, got)
		}
	}
	for _, live := range []string{"ttl", "affinity-epsilon", "backend"} {
		for _, g := range got {
			if g == live || strings.HasPrefix(g, live+" ") {
				t.Errorf("%q is applied by a reload, yet named: %v", live, got)
			}
		}
	}
	if n := len(restartOnly(cur, cur)); n != 0 {
		t.Errorf("nothing changed, %d named", n)
	}
}

// TestValidateAsksEachPart: each part's mistake stops the configuration
// with that part's sentence.
func TestValidateAsksEachPart(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Table.TTL = -1 }, "--ttl must be positive"},
		{func(c *Config) { c.Routing.Policy = "nope" }, "--policy"},
		{func(c *Config) { c.Admission.QueueSize = -1 }, "must not be negative"},
		{func(c *Config) { c.BodyAwait = -time.Millisecond }, "--body-await must not be negative"},
		{func(c *Config) { c.Tracing.SampleRatio = 2 }, "--trace-sample-ratio"},
		{func(c *Config) { c.Telemetry.BackendCacheTokens = []int64{1, 2, 3} }, "--backend-cache-tokens"},
	} {
		c := DefaultConfig()
		c.Backends = []string{"http://127.0.0.1:1"}
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}
