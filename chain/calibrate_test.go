package chain

import (
	"sync"
	"testing"
)

func TestCalibratorLearnsPerModel(t *testing.T) {
	c := NewCalibrator(0)
	if r, ok := c.BytesPerToken("a"); ok || r != DefaultBytesPerToken {
		t.Fatalf("uncalibrated: %v %v", r, ok)
	}
	// Model a: 3 bytes per token, observed below the threshold first.
	c.Observe("a", 3000, 1000)
	if r, ok := c.BytesPerToken("a"); ok || r != DefaultBytesPerToken {
		t.Fatalf("after 1000 tokens: %v %v", r, ok)
	}
	for range 9 {
		c.Observe("a", 3000, 1000)
	}
	if r, ok := c.BytesPerToken("a"); !ok || r != 3 {
		t.Fatalf("model a: %v %v", r, ok)
	}
	// Model b is not calibrated itself: it gets every model's ratio.
	c.Observe("b", 500, 100)
	if r, ok := c.BytesPerToken("b"); !ok || r != 30500.0/10100 {
		t.Fatalf("model b: %v %v", r, ok)
	}
	// Absurd observations are ignored.
	c.Observe("a", 1, 1000)   // 0.001 bytes per token
	c.Observe("a", 1<<20, 10) // 100 KB per token
	c.Observe("a", 0, 10)
	c.Observe("a", 10, 0)
	if r, _ := c.BytesPerToken("a"); r != 3 {
		t.Fatalf("after absurd observations %v", r)
	}
	// 1M tokens at 3 bytes per token in 256-byte blocks.
	if got := c.Blocks("a", 1<<20, 256); got != 3*(1<<20)/256 {
		t.Fatalf("blocks %d", got)
	}
	if got := c.Blocks("a", 0, 256); got != 0 {
		t.Fatalf("blocks of nothing %d", got)
	}
	if got := c.Ratios(); len(got) != 2 || got["a"] != 3 {
		t.Fatalf("ratios %v", got)
	}
}

func TestCalibratorConcurrentObserve(t *testing.T) {
	c := NewCalibrator(5)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := []string{"x", "y"}[g%2]
			for range 1000 {
				c.Observe(m, 40, 10)
			}
		}()
	}
	wg.Wait()
	for _, m := range []string{"x", "y"} {
		if r, ok := c.BytesPerToken(m); !ok || r != 4 {
			t.Fatalf("%s: %v %v", m, r, ok)
		}
	}
}

func TestCalibratorObserveAllocatesNothing(t *testing.T) {
	c := NewCalibrator(0)
	c.Observe("m", 400, 100)
	if n := testing.AllocsPerRun(100, func() { c.Observe("m", 400, 100) }); n != 0 {
		t.Fatalf("Observe allocates %v", n)
	}
	model := []byte("m")
	if n := testing.AllocsPerRun(100, func() { c.ObserveBytes(model, 400, 100) }); n != 0 {
		t.Fatalf("ObserveBytes allocates %v", n)
	}
	if r, ok := c.BytesPerToken("m"); !ok || r != 4 {
		t.Fatalf("ratio %v %v", r, ok)
	}
}
