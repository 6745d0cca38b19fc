package hexdigit

import "testing"

func TestValue(t *testing.T) {
	for c := 0; c < 256; c++ {
		want, wantOK := byte(0), false
		switch {
		case c >= '0' && c <= '9':
			want, wantOK = byte(c-'0'), true
		case c >= 'a' && c <= 'f':
			want, wantOK = byte(c-'a'+10), true
		case c >= 'A' && c <= 'F':
			want, wantOK = byte(c-'A'+10), true
		}
		if v, ok := Value(byte(c)); v != want || ok != wantOK {
			t.Errorf("Value(%q) = %d, %v; want %d, %v", byte(c), v, ok, want, wantOK)
		}
	}
}
