package admit

import (
	"testing"
	"time"
)

func TestRuleMaxPrefill(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name           string
		class          Class
		bound, pending time.Duration
		want           bool
	}{
		{"within the bound", Normal, 500 * ms, 499 * ms, true},
		{"at the bound", Normal, 500 * ms, 500 * ms, true},
		{"past the bound", Low, 500 * ms, 501 * ms, false},
		{"nothing pending", Normal, 500 * ms, 0, true},
		{"class high", High, 500 * ms, time.Hour, true},
		{"no bound", Normal, 0, time.Hour, true},
	} {
		if got := prefillOpen(c.class, c.bound, c.pending); got != c.want {
			t.Errorf("%s: prefillOpen = %v, want %v", c.name, got, c.want)
		}
	}
}
