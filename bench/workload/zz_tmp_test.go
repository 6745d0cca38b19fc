package workload

import (
	"testing"
	"time"
)

func TestTmpAgentStats(t *testing.T) {
	start := time.Now()
	w := Agent{Seed: 1}.Generate()
	gen := time.Since(start)
	var total int64
	mx := 0
	for _, r := range w.Requests {
		total += int64(len(r.Body))
		mx = max(mx, len(r.Body))
	}
	start = time.Now()
	h, _ := Ideal(w.Requests, 16)
	t.Logf("%d requests, %d MB total, max %d, span %v, gen %v, ideal %.4f (%v), unique %d tokens", len(w.Requests), total>>20, mx, w.Duration(), gen, h.Rate(), time.Since(start), h.UniqueTokens)
}
