package admit

import "testing"

func TestRuleHighPool(t *testing.T) {
	for _, c := range []struct {
		name       string
		class      Class
		pool, free int32
		want       bool
	}{
		{"more free than the pool", Normal, 2, 3, true},
		{"as many free as the pool", Normal, 2, 2, false},
		{"none free", Low, 1, 0, false},
		{"class high takes the pool", High, 2, 1, true},
		{"no pool", Normal, 0, 0, true},
	} {
		if got := poolIsOpen(c.class, c.pool, c.free); got != c.want {
			t.Errorf("%s: poolIsOpen = %v, want %v", c.name, got, c.want)
		}
	}
}
