package main

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// kvcaBinary builds this command into the test's temporary directory for
// tests that run the real binary; it skips the test in -short runs and
// where the go tool is not on PATH.
func kvcaBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the kvca binary")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	bin := filepath.Join(t.TempDir(), "kvca")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
