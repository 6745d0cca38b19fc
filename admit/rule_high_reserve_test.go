package admit

import "testing"

func TestRuleHighReserve(t *testing.T) {
	for _, c := range []struct {
		name                   string
		class                  Class
		reserve, limit, others int32
		want                   bool
	}{
		{"more free than the reserve", Normal, 2, 8, 5, true},
		{"the reserve's slots only", Normal, 2, 8, 6, false},
		{"class high takes the reserve", High, 2, 8, 7, true},
		{"no reserve", Low, 0, 8, 7, true},
		{"lowered limit keeps one slot for all", Normal, 4, 2, 0, true},
		{"lowered limit, that slot held", Normal, 4, 2, 1, false},
		{"limit one", Normal, 1, 1, 0, true},
	} {
		if got := highReserveOpen(c.class, c.reserve, c.limit, c.others); got != c.want {
			t.Errorf("%s: highReserveOpen = %v, want %v", c.name, got, c.want)
		}
	}
}
