package cliflag

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// MarkdownTable renders flags as a Markdown table: each flag with its value
// placeholder, its environment variables, its default and its help text,
// as --help shows them.
func MarkdownTable(flags []cli.Flag) string {
	var b strings.Builder
	b.WriteString("| flag | environment | default | meaning |\n|---|---|---|---|\n")
	for _, f := range flags {
		doc, ok := f.(cli.DocGenerationFlag)
		if !ok {
			continue
		}
		placeholder, usage := unquoteUsage(doc.GetUsage())
		name := "--" + f.Names()[0]
		def := ""
		if doc.TakesValue() {
			if placeholder == "" {
				placeholder = "value"
			}
			name += " " + placeholder
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

var blockRE = regexp.MustCompile(`(?s)(<!-- BEGIN GENERATED ([a-z-]+)[^>]*-->\n)(.*?)(<!-- END GENERATED -->)`)

// CheckDoc compares the generated blocks of the Markdown file at path
// (between <!-- BEGIN GENERATED name --> and <!-- END GENERATED -->) with
// blocks, by name. With update it rewrites the file instead. It returns
// what is wrong: blocks missing from the file, or a file out of date.
func CheckDoc(path string, blocks map[string]string, update bool) []string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}
	}
	seen := map[string]bool{}
	updated := blockRE.ReplaceAllStringFunc(string(raw), func(m string) string {
		g := blockRE.FindStringSubmatch(m)
		seen[g[2]] = true
		if table, ok := blocks[g[2]]; ok {
			return g[1] + table + g[4]
		}
		return m
	})
	var problems []string
	for name := range blocks {
		if !seen[name] {
			problems = append(problems, fmt.Sprintf("%s has no <!-- BEGIN GENERATED %s --> block", path, name))
		}
	}
	if updated != string(raw) {
		if !update {
			return append(problems, path+" is not what the flags say: run make docs")
		}
		if err := os.WriteFile(path, []byte(updated), 0o644); err != nil {
			return append(problems, err.Error())
		}
	}
	return problems
}
