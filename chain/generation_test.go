package chain

import (
	"testing"
	"time"
)

func TestStartGeneration(t *testing.T) {
	tb := NewTable(Config{TTL: time.Minute, MaxBlocks: 64})
	if g := tb.StartGeneration(0, 7); g != 7 || tb.Generation(0) != 7 {
		t.Fatalf("start at 7: %d, table %d", g, tb.Generation(0))
	}
	if g := tb.StartGeneration(0, 3); g != 7 {
		t.Fatalf("a lower start lowered the generation to %d", g)
	}
	if g := tb.StartGeneration(1, 512); g != 513 {
		t.Fatalf("start at 512 (0 mod 256): %d, want 513", g)
	}
	if tb.Generation(2) != 1 {
		t.Fatalf("another backend moved: %d", tb.Generation(2))
	}
	if g := tb.Reset(0); g != 8 {
		t.Fatalf("reset after a start at 7: %d, want 8", g)
	}
	// A location learned under the started generation is live.
	tb.Touch([]uint64{42}, 1, tb.Now())
	if got := tb.Lookup(42, tb.Now()); got.Len() != 1 || !got.Has(1) {
		t.Fatalf("lookup after start: %v", got)
	}
}

// TestStartGenerationExact: the generation in force after a start, from a
// backend at generation 1 (new) or 7.
func TestStartGenerationExact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		from, g  uint32
		want     uint32
		resetGen uint32 // Reset right after
	}{
		{"higher", 1, 7, 7, 8},
		{"equal", 7, 7, 7, 8},
		{"lower", 7, 3, 7, 8},
		{"0 mod 256 is skipped", 1, 512, 513, 514},
		{"255 resets past 256", 1, 255, 255, 257},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb := NewTable(Config{TTL: time.Minute, MaxBlocks: 64})
			if tc.from != 1 {
				tb.StartGeneration(0, tc.from)
			}
			if g := tb.StartGeneration(0, tc.g); g != tc.want || tb.Generation(0) != tc.want {
				t.Fatalf("StartGeneration(%d) from %d: %d, table %d; want %d", tc.g, tc.from, g, tb.Generation(0), tc.want)
			}
			if tb.Generation(1) != 1 {
				t.Fatalf("another backend moved to %d", tb.Generation(1))
			}
			if g := tb.Reset(0); g != tc.resetGen {
				t.Fatalf("reset: %d, want %d", g, tc.resetGen)
			}
		})
	}
}
