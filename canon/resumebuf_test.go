package canon

import "testing"

// TestBufClass: a request's class is the smallest whose buffers hold it,
// and a buffer of a class's capacity goes back to that class.
func TestBufClass(t *testing.T) {
	for _, n := range []int{-1, 0} {
		if c := bufClass(n); c != -1 {
			t.Fatalf("bufClass(%d) = %d", n, c)
		}
	}
	for n := 1; n <= classSize(rzClasses-1)+1; n += 1 + n/97 {
		c := bufClass(n)
		if n > classSize(rzClasses-1) {
			if c != -1 {
				t.Fatalf("bufClass(%d) = %d past the last class", n, c)
			}
			continue
		}
		if c < 0 || classSize(c) < n || (c > 0 && classSize(c-1) >= n) {
			t.Fatalf("bufClass(%d) = %d (size %d)", n, c, classSize(c))
		}
	}
	for c := range rzClasses {
		if bufClass(classSize(c)) != c || (c > 0 && classSize(c) <= classSize(c-1)) {
			t.Fatalf("class %d, size %d", c, classSize(c))
		}
	}
	if classSize(0) != 512 || classSize(1) != 640 || classSize(4) != 1024 || classSize(rzClasses-1) != 16<<20 {
		t.Fatal("classes are not 512, 640, ..., 1024, ..., 16 MB")
	}
}
