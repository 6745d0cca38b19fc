package pickercost

import (
	"os"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// The command name may hold spaces and parentheses.
	line := "4242 (kv ca) (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 37 0 0 20 0 9 0 123 0 0\n"
	got, err := parseStat(line)
	if err != nil || got != 2870*time.Millisecond {
		t.Fatalf("parseStat = %v, %v; want 2.87s", got, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x 2 0"} {
		if _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q) accepted", bad)
		}
	}
	// This process has used some CPU by now; reading it must work.
	if _, err := processCPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}

func TestParseSizes(t *testing.T) {
	got, err := ParseSizes("1KB, 128kb,512KB,600B,1MB")
	want := []int{1 << 10, 128 << 10, 512 << 10, 600, 1 << 20}
	if err != nil || len(got) != len(want) {
		t.Fatalf("ParseSizes = %v, %v", got, err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("size %d = %d, want %d", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"", "x", "0KB", "-1KB", "100B", "3MB", "1GB"} {
		if _, err := ParseSizes(bad); err == nil {
			t.Errorf("ParseSizes(%q) accepted", bad)
		}
	}
	for n, name := range map[int]string{1 << 10: "1KB", 512 << 10: "512KB", 1 << 20: "1MB", 600: "600B", 1536: "1536B"} {
		if s := SizeName(n); s != name {
			t.Errorf("SizeName(%d) = %s, want %s", n, s, name)
		}
	}
}

func TestPercentileAndRequests(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i))
	}
	if p := percentile(d, 50); p != 50 {
		t.Errorf("p50 = %d", p)
	}
	if p := percentile(d, 99); p != 99 {
		t.Errorf("p99 = %d", p)
	}
	if p := percentile(d[:1], 99); p != 100 {
		t.Errorf("p99 of one = %d", p)
	}
	if percentile(nil, 50) != 0 || d[0] != 100 {
		t.Error("percentile of nothing is not 0, or it sorted its input")
	}
	for size, want := range map[int]int{1 << 10: 4000, 128 << 10: 1024, 512 << 10: 256, 2 << 20: 200} {
		if n := RequestsFor(size); n != want {
			t.Errorf("RequestsFor(%d) = %d, want %d", size, n, want)
		}
	}
}
