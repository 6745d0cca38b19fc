package admit

import "testing"

func TestRuleLowerClass(t *testing.T) {
	// size 18, k 8: each class keeps a reserve of 2 places.
	for _, c := range []struct {
		name      string
		class     Class
		lens      [NumClasses]int
		want      Class
		wantFound bool
	}{
		{"the lowest class first", High, [NumClasses]int{6, 6, 6}, Low, true},
		{"low within its reserve", High, [NumClasses]int{8, 8, 2}, Normal, true},
		{"low just over its reserve", Normal, [NumClasses]int{10, 5, 3}, Low, true},
		{"every lower class within its reserve", High, [NumClasses]int{14, 2, 2}, High, false},
		{"nothing below low", Low, [NumClasses]int{0, 0, 18}, Low, false},
	} {
		got, ok := lowerClassVictim(c.class, c.lens, 18, 8)
		if ok != c.wantFound || ok && got != c.want {
			t.Errorf("%s: lowerClassVictim = %v, %v, want %v, %v", c.name, got, ok, c.want, c.wantFound)
		}
	}
}
