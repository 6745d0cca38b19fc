package main

import (
	"os"
	"slices"
	"testing"

	"github.com/kvca/kvca/internal/cliflag"
	"github.com/kvca/kvca/sched"
)

// TestConfigurationDoc: docs/configuration.md lists every flag of kvca
// serve and kvca mock as --help does (placeholder, variable, default, help
// text). After changing a flag, regenerate it with make docs.
func TestConfigurationDoc(t *testing.T) {
	blocks := map[string]string{
		"serve":           cliflag.MarkdownTable(append(serveFlags(), configFlag)),
		"serve-kdn":       cliflag.MarkdownTable(kdnServeFlags()),
		"serve-placement": cliflag.MarkdownTable(sched.TTFTFlags(env)),
		"serve-cluster":   cliflag.MarkdownTable(clusterFlags()),
		"serve-picker":    cliflag.MarkdownTable(append(extProcFlags(), poolFlags()...)),
		"mock":            cliflag.MarkdownTable(mockCommand().Flags),
	}
	for _, p := range cliflag.CheckDoc("../../docs/configuration.md", blocks, os.Getenv("KVCA_UPDATE_DOCS") != "") {
		t.Error(p)
	}

	// Every flag of serve is in one of the blocks: a flag added to the
	// command but to none of the groups would otherwise go undocumented.
	var grouped []string
	for _, f := range append(append(append(append(serveFlags(), configFlag), kdnServeFlags()...), clusterFlags()...), append(append(append(sched.TTFTFlags(env), extProcFlags()...), poolFlags()...), retiredFlags()...)...) {
		grouped = append(grouped, f.Names()[0])
	}
	for _, f := range serveCommand().Flags {
		if !slices.Contains(grouped, f.Names()[0]) {
			t.Errorf("serve --%s is in no group of docs/configuration.md", f.Names()[0])
		}
	}
}
