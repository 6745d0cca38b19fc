package h1

import "testing"

// TestValidValueEveryByte: the word-at-a-time validValue agrees with the
// byte-by-byte definition for every byte value at every position of
// values of 0 to 24 bytes, among neighbours that are valid, tabs, DEL or
// obs-text.
func TestValidValueEveryByte(t *testing.T) {
	t.Parallel()
	for _, fill := range []byte{'a', '\t', 0x80, 0xff, ' '} {
		for n := 0; n <= 24; n++ {
			v := make([]byte, n)
			for i := range v {
				v[i] = fill
			}
			if !validValue(v) {
				t.Fatalf("fill %#x len %d: refused", fill, n)
			}
			for at := 0; at < n; at++ {
				for c := 0; c < 256; c++ {
					v[at] = byte(c)
					want := validBytes(v)
					if got := validValue(v); got != want {
						t.Fatalf("fill %#x len %d byte %#x at %d: got %v, want %v", fill, n, c, at, got, want)
					}
				}
				v[at] = fill
			}
		}
	}
}
