package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeRefusesBadSettings: each mistake stops start-up with one
// sentence naming it (nothing listens: validation runs before).
func TestServeRefusesBadSettings(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "kvca.yaml")
	cfg2 := filepath.Join(dir, "kvca2.yaml")
	for name, text := range map[string]string{cfg: "blok-size: 64\n", cfg2: "block-size: 100\nbackend: [http://127.0.0.1:1]\n"} {
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve"}, "at least one --backend"},
		{[]string{"serve", "--backend", "ftp://x"}, "absolute http:// or https:// URL"},
		{[]string{"serve", "--backend", "127.0.0.1:8000"}, "absolute http"},
		{[]string{"serve", "--backend", "http://a:1", "--block-size", "12"}, "multiple of 8"},
		{[]string{"serve", "--backend", "http://a:1", "--hash-key", "abcd"}, "32 hex digits"},
		{[]string{"serve", "--backend", "http://a:1", "--hash-key", strings.Repeat("zz", 16)}, "not hex"},
		{[]string{"serve", "--backend", "http://a:1", "--ttl", "0s"}, "--ttl must be positive"},
		{[]string{"serve", "--backend", "http://a:1", "--policy", "fastest"}, "unknown policy"},
		{[]string{"serve", "--backend", "http://a:1", "--log-format", "xml"}, "--log-format"},
		{[]string{"serve", "--backend", "http://a:1", "--prefill-release", "never"}, "--prefill-release"},
		{[]string{"serve", "--backend", "http://a:1", "--loops", "-1"}, "--loops must not be negative"},
		{[]string{"serve", "--backend", "http://a:1", "--max-inflight-per-backend", "2", "--queue-high-reserve", "2"}, "--queue-high-reserve must be below"},
		{[]string{"serve", "--config", cfg}, `unknown setting "blok-size"`},
		{[]string{"serve", "--config", cfg2}, "--block-size"},
	} {
		err := newApp().Run(append([]string{"kvca"}, tc.args...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
	}
}
