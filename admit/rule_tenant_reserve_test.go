package admit

import "testing"

func TestRuleTenantReserveApplies(t *testing.T) {
	for _, c := range []struct {
		name                string
		reserve             int32
		over                bool
		lo, hi, free, wantB int32
	}{
		{"applies", 2, true, 1, 4, 2, 4},
		{"no reserve", 0, true, 1, 4, 0, -1},
		{"not shedding", 2, false, 1, 4, 0, -1},
		{"no tenant holds slots", 2, true, 0, 0, 0, -1},
		{"no tenant is spared", 2, true, 2, 4, 0, -1},
		{"more free than the reserve", 2, true, 1, 4, 3, -1},
	} {
		if got := reserveBusiest(c.reserve, c.over, c.lo, c.hi, c.free); got != c.wantB {
			t.Errorf("%s: reserveBusiest = %d, want %d", c.name, got, c.wantB)
		}
	}
}

func TestRuleTenantReserveHoldsBack(t *testing.T) {
	for _, c := range []struct {
		name         string
		class        Class
		own, busiest int32
		want         bool
	}{
		{"the busiest tenant", Normal, 4, 4, true},
		{"half the busiest", Low, 2, 4, true},
		{"a spared tenant", Normal, 1, 4, false},
		{"class high", High, 4, 4, false},
		{"reserve off", Normal, 4, -1, false},
	} {
		if got := isHeldBack(c.class, c.own, c.busiest); got != c.want {
			t.Errorf("%s: isHeldBack = %v, want %v", c.name, got, c.want)
		}
	}
}
