package admit

import "testing"

func TestRuleLate(t *testing.T) {
	const s = int64(1e9)
	for _, c := range []struct {
		name                     string
		class                    Class
		waited, prefill, timeout int64
		want                     bool
	}{
		{"in time", Normal, 4 * s, 1 * s, 10 * s, false},
		{"exactly at the timeout", Normal, 9 * s, 1 * s, 10 * s, false},
		{"past the timeout", Normal, 9 * s, 2 * s, 10 * s, true},
		{"long prefill counts half the timeout", Normal, 5 * s, 30 * s, 10 * s, false},
		{"long prefill after half the timeout", Low, 6 * s, 30 * s, 10 * s, true},
		{"waited past the timeout alone", Normal, 11 * s, 0, 10 * s, true},
		{"high is never late", High, 20 * s, 30 * s, 10 * s, false},
	} {
		if got := isLate(c.class, c.waited, c.prefill, c.timeout); got != c.want {
			t.Errorf("%s: isLate = %v, want %v", c.name, got, c.want)
		}
	}
}
