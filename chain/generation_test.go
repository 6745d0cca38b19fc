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
