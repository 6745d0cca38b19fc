package chain

import "testing"

// TestWithdraw: a prediction withdrawn is gone, a confirmed location of
// the same backend and another backend's prediction stay.
func TestWithdraw(t *testing.T) {
	tb := NewTable(Config{TTL: 60_000_000_000, MaxBlocks: 1 << 10})
	tb.SetPredictTTL(10_000_000_000)
	now := tb.Now()
	a := []uint64{1, 2, 3}
	b := []uint64{1, 2, 3, 4}
	tb.Touch(a[:1], 0, now) // backend 0 holds the first block, confirmed
	tb.Predict(b, 0, now)
	tb.Predict(b, 1, now)
	if n := tb.Withdraw(b, 0); n != 3 {
		t.Fatalf("withdrew %d locations, want 3 (the confirmed one stays)", n)
	}
	if !tb.Lookup(1, now).Has(0) || tb.Lookup(2, now).Has(0) || tb.Lookup(4, now).Has(0) {
		t.Fatalf("backend 0 after the withdrawal: %v %v %v", tb.Lookup(1, now), tb.Lookup(2, now), tb.Lookup(4, now))
	}
	for _, h := range b {
		if !tb.Lookup(h, now).Has(1) {
			t.Fatalf("block %d lost backend 1's prediction", h)
		}
	}
	// Predicted again, it is recorded again.
	tb.Predict(b, 0, now)
	if !tb.Lookup(4, now).Has(0) {
		t.Fatal("a prediction after the withdrawal was skipped")
	}
	if n := tb.Withdraw(nil, 0); n != 0 {
		t.Fatal(n)
	}
}
