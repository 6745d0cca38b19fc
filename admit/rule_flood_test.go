package admit

import "testing"

func TestRuleFlood(t *testing.T) {
	for _, c := range []struct {
		name         string
		biggest, own int
		want         bool
	}{
		{"two more than the newcomer's", 5, 3, true},
		{"one more", 4, 3, false},
		{"the newcomer's own tenant", 3, 3, false},
		{"a new tenant beside one of two", 2, 0, true},
		{"beside one of one", 1, 0, false},
	} {
		if got := floods(c.biggest, c.own); got != c.want {
			t.Errorf("%s: floods = %v, want %v", c.name, got, c.want)
		}
	}
}
