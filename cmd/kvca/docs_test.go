package main

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// flagTable renders flags as a Markdown table: each flag with its value
// placeholder, its environment variable, its default and its help text,
// exactly as kvca --help has them.
func flagTable(flags []cli.Flag) string {
	var b strings.Builder
	b.WriteString("| flag | environment | default | meaning |\n|---|---|---|---|\n")
	for _, f := range flags {
		doc, ok := f.(cli.DocGenerationFlag)
		if !ok {
			continue
		}
		placeholder, usage := unquoteUsage(doc.GetUsage())
		name := "--" + f.Names()[0]
		if doc.TakesValue() {
			if placeholder == "" {
				placeholder = "value"
			}
			name += " " + placeholder
		}
		def := ""
		if doc.TakesValue() {
			def = doc.GetDefaultText()
		}
		if u, err := strconv.Unquote(def); err == nil && strings.HasPrefix(def, `"`) {
			def = u // string defaults come quoted
		}
		if def != "" {
			def = "`" + def + "`"
		}
		var envs []string
		for _, e := range doc.GetEnvVars() {
			envs = append(envs, "`"+e+"`")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", name, strings.Join(envs, ", "), def, strings.ReplaceAll(usage, "|", `\|`))
	}
	return b.String()
}

// unquoteUsage splits a usage text as the help does: the first
// `backquoted` word is the value's placeholder, shown without the quotes.
func unquoteUsage(usage string) (placeholder, text string) {
	i := strings.IndexByte(usage, '`')
	if i < 0 {
		return "", usage
	}
	j := strings.IndexByte(usage[i+1:], '`')
	if j < 0 {
		return "", usage
	}
	placeholder = usage[i+1 : i+1+j]
	return placeholder, usage[:i] + placeholder + usage[i+2+j:]
}

// generatedBlocks are the parts of docs/configuration.md rendered from the
// flags themselves, by name of their marker.
func generatedBlocks() map[string]string {
	return map[string]string{
		"serve":         flagTable(append(serveFlags(), configFlag)),
		"serve-kdn":     flagTable(kdnServeFlags()),
		"serve-cluster": flagTable(clusterFlags()),
		"mock":          flagTable(mockCommand().Flags),
	}
}

var blockRE = regexp.MustCompile(`(?s)(<!-- BEGIN GENERATED ([a-z-]+)[^>]*-->\n)(.*?)(<!-- END GENERATED -->)`)

// TestConfigurationDoc: docs/configuration.md lists every flag of kvca
// serve and kvca mock as --help does (placeholder, variable, default,
// help text). After changing a flag, regenerate it with make docs
// (KVCA_UPDATE_DOCS=1 go test -run TestConfigurationDoc ./cmd/kvca).
func TestConfigurationDoc(t *testing.T) {
	const path = "../../docs/configuration.md"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := generatedBlocks()
	seen := map[string]bool{}
	updated := blockRE.ReplaceAllStringFunc(string(raw), func(m string) string {
		g := blockRE.FindStringSubmatch(m)
		seen[g[2]] = true
		if table, ok := want[g[2]]; ok {
			return g[1] + table + g[4]
		}
		return m
	})
	for name := range want {
		if !seen[name] {
			t.Errorf("%s has no <!-- BEGIN GENERATED %s --> block", path, name)
		}
	}
	if updated != string(raw) {
		if os.Getenv("KVCA_UPDATE_DOCS") != "" {
			if err := os.WriteFile(path, []byte(updated), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("rewrote %s", path)
		} else {
			t.Errorf("%s is not what the flags say: run make docs", path)
		}
	}

	// Every flag of serve is in one of the blocks: a flag added to the
	// command but to none of the groups would otherwise go undocumented.
	var grouped []string
	for _, f := range append(append(append(serveFlags(), configFlag), kdnServeFlags()...), clusterFlags()...) {
		grouped = append(grouped, f.Names()[0])
	}
	for _, f := range serveCommand().Flags {
		if !slices.Contains(grouped, f.Names()[0]) {
			t.Errorf("serve --%s is in no group of docs/configuration.md", f.Names()[0])
		}
	}
}
