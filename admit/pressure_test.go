package admit

import "testing"

func TestRetryAfter(t *testing.T) {
	const s = int64(1e9)
	for _, c := range []struct {
		name    string
		n       int
		rate    float64
		timeout int64
		want    int
	}{
		{"no rate yet: the timeout", 5, 0, 10 * s, 10},
		{"drain time", 9, 2, 10 * s, 5},
		{"rounded up", 2, 2, 10 * s, 2},
		{"at least one", 0, 100, 10 * s, 1},
		{"at most the timeout", 1000, 1, 10 * s, 10},
		{"timeout rounded up", 1000, 1, 2*s + 1, 3},
		{"tiny timeout", 0, 0, 1, 1},
	} {
		if got := retryAfter(c.n, c.rate, c.timeout); got != c.want {
			t.Errorf("%s: retryAfter = %d, want %d", c.name, got, c.want)
		}
	}
}
