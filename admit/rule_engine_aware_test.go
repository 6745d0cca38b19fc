package admit

import "testing"

func TestRuleEngineAware(t *testing.T) {
	for _, c := range []struct {
		name                        string
		cur, top, inflight, waiting int32
		fresh                       bool
		want                        int32
	}{
		{"queue: down to in flight minus it", 8, 8, 8, 3, true, 5},
		{"queue: never up", 4, 8, 8, 1, true, 4},
		{"queue: at least one", 8, 8, 2, 5, true, 1},
		{"no queue: up by one", 5, 8, 5, 0, true, 6},
		{"no queue: at most the top", 8, 8, 8, 0, true, 8},
		{"stale: up by one", 5, 8, 8, 4, false, 6},
	} {
		if got := engineLimit(c.cur, c.top, c.inflight, c.waiting, c.fresh); got != c.want {
			t.Errorf("%s: engineLimit = %d, want %d", c.name, got, c.want)
		}
	}
}
