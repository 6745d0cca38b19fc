package admit

import "testing"

func TestRuleStarvation(t *testing.T) {
	for _, c := range []struct {
		name         string
		passed, k, n int
		want         bool
	}{
		{"passed over k times", 8, 8, 1, true},
		{"more", 9, 8, 3, true},
		{"fewer", 7, 8, 1, false},
		{"nobody waits", 8, 8, 0, false},
	} {
		if got := starved(c.passed, c.k, c.n); got != c.want {
			t.Errorf("%s: starved = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestRuleStarvationCounts(t *testing.T) {
	a := &Admitter{}
	a.q[Normal].n, a.q[Low].n = 1, 1
	a.passed[Low] = 3
	a.served(High)
	if a.passed != [NumClasses]int{0, 1, 4} {
		t.Fatalf("after a high grant: passed %v", a.passed)
	}
	a.served(Normal)
	if a.passed != [NumClasses]int{0, 0, 5} {
		t.Fatalf("after a normal grant: passed %v", a.passed)
	}
	a.q[Low].n = 0
	a.served(High)
	if a.passed != [NumClasses]int{0, 1, 5} {
		t.Fatalf("an empty class is not passed over: %v", a.passed)
	}
}
