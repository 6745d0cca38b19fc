package edge

import (
	"runtime"
	"testing"
)

func TestSpareP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	if n := SpareP(0); n != 2 || runtime.GOMAXPROCS(0) != 3 {
		t.Fatalf("SpareP(0) at GOMAXPROCS 2 = %d loops, GOMAXPROCS %d; want 2, 3", n, runtime.GOMAXPROCS(0))
	}
	// Enough Ps already: nothing changes.
	runtime.GOMAXPROCS(8)
	if n := SpareP(3); n != 3 || runtime.GOMAXPROCS(0) != 8 {
		t.Fatalf("SpareP(3) at GOMAXPROCS 8 = %d loops, GOMAXPROCS %d; want 3, 8", n, runtime.GOMAXPROCS(0))
	}
}
