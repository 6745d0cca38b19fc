package admit

import "testing"

func TestRuleSpared(t *testing.T) {
	for _, c := range []struct {
		name         string
		over         bool
		own, busiest int32
		want         bool
	}{
		{"under half the busiest, shedding", true, 1, 3, true},
		{"exactly half", true, 2, 4, false},
		{"the busiest itself", true, 4, 4, false},
		{"holding nothing beside a busy one", true, 0, 1, true},
		{"alone", true, 0, 0, false},
		{"not shedding", false, 1, 10, false},
	} {
		if got := isSpared(c.over, c.own, c.busiest); got != c.want {
			t.Errorf("%s: isSpared = %v, want %v", c.name, got, c.want)
		}
	}
}
