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
	// A model never learned, from requests whose ratio is never kept (an
	// engine reporting a fixed prompt count): nothing to allocate for.
	other := []byte("unknown")
	if n := testing.AllocsPerRun(100, func() { c.ObserveBytes(other, 4000, 1) }); n != 0 {
		t.Fatalf("ObserveBytes of an implausible ratio allocates %v", n)
	}
	if r, ok := c.BytesPerToken("m"); !ok || r != 4 {
		t.Fatalf("ratio %v %v", r, ok)
	}
}

// TestCalibratorBounds: the calibration threshold and the ratio bounds are
// inclusive, for both ways in (a model already known takes ObserveBytes'
// own checks).
func TestCalibratorBounds(t *testing.T) {
	t.Parallel()
	const n = CalibrateMinTokens
	for _, tc := range []struct {
		name string
		// known: the model was seen first, with 4 bytes for 1 token.
		known, bytes   bool
		cbr, tokens    int
		want           float64
		wantCalibrated bool
	}{
		{"exactly the minimum tokens", false, false, 3 * n, n, 3, true},
		{"one token short", false, false, 3 * (n - 1), n - 1, DefaultBytesPerToken, false},
		{"lowest ratio kept", false, false, n / 4, n, 0.25, true},
		{"below the lowest ignored", false, false, n/4 - 1, n, DefaultBytesPerToken, false},
		{"highest ratio kept", false, false, 64 * n, n, 64, true},
		{"above the highest ignored", false, false, 64*n + 1, n, DefaultBytesPerToken, false},
		{"bytes: a new model", false, true, 3 * n, n, 3, true},
		{"bytes: exactly the minimum tokens", true, true, 3 * (n - 1), n - 1, float64(4+3*(n-1)) / n, true},
		{"bytes: one token short", true, true, 3 * (n - 2), n - 2, DefaultBytesPerToken, false},
		{"bytes: lowest ratio kept", true, true, n / 4, n, float64(4+n/4) / (n + 1), true},
		{"bytes: below the lowest ignored", true, true, n/4 - 1, n, DefaultBytesPerToken, false},
		{"bytes: highest ratio kept", true, true, 64 * n, n, float64(4+64*n) / (n + 1), true},
		{"bytes: above the highest ignored", true, true, 64*n + 1, n, DefaultBytesPerToken, false},
		{"bytes: no bytes ignored", true, true, 0, n, DefaultBytesPerToken, false},
		{"bytes: no tokens ignored", true, true, 3 * n, 0, DefaultBytesPerToken, false},
		{"bytes: negative tokens ignored", true, true, 3 * n, -n, DefaultBytesPerToken, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := NewCalibrator(0)
			if tc.known {
				c.Observe("m", 4, 1)
			}
			if tc.bytes {
				c.ObserveBytes([]byte("m"), tc.cbr, tc.tokens)
			} else {
				c.Observe("m", tc.cbr, tc.tokens)
			}
			if r, ok := c.BytesPerToken("m"); r != tc.want || ok != tc.wantCalibrated {
				t.Fatalf("ratio %v calibrated %v, want %v %v", r, ok, tc.want, tc.wantCalibrated)
			}
		})
	}
}

func TestCalibratorBlocks(t *testing.T) {
	t.Parallel()
	c := NewCalibrator(0)
	c.Observe("m", 3*CalibrateMinTokens, CalibrateMinTokens)
	for _, tc := range []struct {
		name      string
		model     string
		tokens    int64
		blockSize int
		want      int
	}{
		{"calibrated", "m", 1 << 20, 256, 3 * (1 << 20) / 256},
		{"fleet ratio for an unseen model", "x", 1 << 20, 256, 3 * (1 << 20) / 256},
		{"rounded down", "m", 100, 256, 1}, // 300 bytes
		{"no tokens", "m", 0, 256, 0},
		{"negative tokens", "m", -1 << 20, 256, 0},
		{"no block size", "m", 1 << 20, 0, 0},
		{"negative block size", "m", 1 << 20, -256, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := c.Blocks(tc.model, tc.tokens, tc.blockSize); got != tc.want {
				t.Fatalf("Blocks(%q, %d, %d) = %d, want %d", tc.model, tc.tokens, tc.blockSize, got, tc.want)
			}
		})
	}
}
