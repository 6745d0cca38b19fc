package admit

import (
	"testing"
	"time"
)

func TestRuleHighPreempts(t *testing.T) {
	for _, c := range []struct {
		name        string
		high, limit int32
		healthy     bool
		pending     time.Duration
		want        bool
	}{
		{"a lower-class sequence to preempt", 3, 4, true, 0, true},
		{"every slot high", 4, 4, true, 0, false},
		{"a prefill pending", 0, 4, true, time.Millisecond, false},
		{"unhealthy", 0, 4, false, 0, false},
	} {
		if got := canPreempt(c.high, c.limit, c.healthy, c.pending); got != c.want {
			t.Errorf("%s: canPreempt = %v, want %v", c.name, got, c.want)
		}
	}
}
