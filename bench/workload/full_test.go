package workload

import (
	"os"
	"testing"
	"time"
)

// TestFullTraceIdeal reports both ideal hit rates of the whole conversation
// trace. It takes ~a minute and ~2 GB, so it runs only when asked.
func TestFullTraceIdeal(t *testing.T) {
	if os.Getenv("KVCA_FULL_TRACE") == "" {
		t.Skip("set KVCA_FULL_TRACE=1 to run")
	}
	start := time.Now()
	w, err := LoadTrace(tracePath, TraceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	followups, turns := 0, 0
	for _, r := range w.Requests {
		if r.Turn > 0 {
			followups++
		}
		turns = max(turns, r.Turn)
	}
	built := time.Since(start)
	ideal, err := Ideal(w.Requests, 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests (%d follow-ups, max turn %d) built in %v; ideal: trace units %.4f, engine units (16-token blocks) %.4f",
		len(w.Requests), followups, turns, built, w.TraceIdeal.Rate(), ideal.Rate())
}
