package admit

import "testing"

func TestRuleHolderWait(t *testing.T) {
	const s = int64(1e9)
	for _, c := range []struct {
		name                             string
		class                            Class
		base, override, timeout, leaving int64
		want                             int64
	}{
		{"the configured wait", Normal, s / 4, 0, 10 * s, 0, s / 4},
		{"the request's own", Normal, s / 4, 2 * s, 10 * s, 0, 2 * s},
		{"at most half the timeout", Low, 8 * s, 0, 10 * s, 0, 5 * s},
		{"worth the timeout", Normal, s / 4, 0, 10 * s, 6 * s, 10*s - 1},
		{"leaving exactly half", Normal, s / 4, 0, 10 * s, 5 * s, s / 4},
		{"no wait set", Normal, 0, 0, 10 * s, 6 * s, 0},
		{"class high never waits", High, s, 0, 10 * s, 6 * s, 0},
	} {
		if got := holderWait(c.class, c.base, c.override, c.timeout, c.leaving); got != c.want {
			t.Errorf("%s: holderWait = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestRuleHolderEnd(t *testing.T) {
	for _, c := range []struct {
		toTimeout, over bool
		want            Rule
	}{
		{false, false, RuleHolderWaitEnd},
		{false, true, RuleHolderWaitEnd},
		{true, false, RuleHolderWaitEnd},
		{true, true, RuleHolderLate},
	} {
		if got := holderEnd(c.toTimeout, c.over); got != c.want {
			t.Errorf("holderEnd(%v, %v) = %v, want %v", c.toTimeout, c.over, got, c.want)
		}
	}
}
