package main

import (
	"os"
	"testing"

	"github.com/kvca/kvca/internal/cliflag"
)

// TestBenchDoc: docs/bench.md lists every flag of kvca-bench bench as
// --help does. After changing a flag, regenerate it with make docs.
func TestBenchDoc(t *testing.T) {
	blocks := map[string]string{"bench": cliflag.MarkdownTable(benchCommand().Flags)}
	for _, p := range cliflag.CheckDoc("../../docs/bench.md", blocks, os.Getenv("KVCA_UPDATE_DOCS") != "") {
		t.Error(p)
	}
}
