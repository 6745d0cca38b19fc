package chain_test

import (
	"testing"
	"time"

	"github.com/kvca/kvca/chain"
)

// A long chain's touch, prediction and walks (a shard at a time, or
// through the record of a chain confirmed whole) allocate nothing in
// steady state, a record standing or not.
func TestLongChainNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race")
	}
	tb := chain.NewTable(chain.Config{TTL: time.Hour, MaxBlocks: 1 << 20})
	long := make([]uint64, 4096)
	for i := range long {
		long[i] = uint64(i+1) * 0x9e3779b97f4a7c15
	}
	now := tb.Now()
	var match [chain.MaxBackends]int32
	step := func() {
		now++
		tb.Predict(long, 1, now)
		tb.Prefix(long, now)
		tb.Matches(long, now, &match)
		tb.Touch(long, 1, now)
		tb.Predict(long[:3000], 2, now) // no record: a walk and a write
		tb.Prefix(long[:3000], now)
	}
	step()
	if n := testing.AllocsPerRun(50, step); n != 0 {
		t.Fatalf("%v allocs per step", n)
	}
}
