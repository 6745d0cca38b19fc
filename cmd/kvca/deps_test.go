package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryLinksNoBenchTooling: the binary that runs at the edge links
// neither the NATS server (the bench embeds one; kvca serve only connects
// to NATS) nor the plotting library of the bench's charts. Both belong to
// cmd/kvca-bench.
func TestBinaryLinksNoBenchTooling(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/nats-io/nats-server", "gonum.org/", "github.com/kvca/kvca/bench/run", "github.com/kvca/kvca/cluster/embednats"} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("cmd/kvca links %s", pkg)
			}
		}
	}
}
