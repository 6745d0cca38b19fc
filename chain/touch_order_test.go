package chain

import (
	"testing"
	"time"
)

// TestTouchOutOfOrder: requests of one prompt answered out of the order
// they started in touch its chain with an earlier date after a later one:
// that touch changes nothing (every block keeps the later time), and a
// touch after the slack still refreshes them.
func TestTouchOutOfOrder(t *testing.T) {
	tb := NewTable(Config{TTL: time.Minute, MaxBlocks: 1 << 16, TouchSlack: 10 * time.Millisecond})
	chain := make([]uint64, 64)
	for i := range chain {
		chain[i] = uint64(i)*0x9e3779b97f4a7c15 + 7
	}
	last := func() int64 {
		l, ok := tb.LocationOf(chain[len(chain)-1], 1, 2000)
		if !ok {
			t.Fatal("no location")
		}
		return l.Last
	}
	tb.Touch(chain, 1, 1000)
	tb.Touch(chain, 1, 990) // started earlier, answered later
	if got := last(); got != 1000 {
		t.Fatalf("last access %d after an earlier-dated touch, want 1000", got)
	}
	for _, h := range chain {
		if l, _ := tb.LocationOf(h, 1, 2000); l.Last != 1000 {
			t.Fatalf("block %x at %d", h, l.Last)
		}
	}
	tb.Touch(chain, 1, 1500)
	if got := last(); got != 1500 {
		t.Fatalf("a touch past the slack left %d, want 1500", got)
	}
}
