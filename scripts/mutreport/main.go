// Command mutreport turns gremlins' JSON results into docs/mutation.md and
// prints each package's efficacy. Each surviving mutant is listed with the
// reason it is equivalent (it changes no behaviour a test could observe)
// when equivalent.txt gives one, and marked as not analysed otherwise.
// Packages an earlier report names and this run did not test keep their
// row and section, so that one package can be run on its own.
//
//	mutreport -reasons equivalent.txt -o docs/mutation.md sched=results/sched.json ...
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

type result struct {
	Files []struct {
		Name      string `json:"file_name"`
		Mutations []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
			Line   int    `json:"line"`
			Column int    `json:"column"`
		} `json:"mutations"`
	} `json:"files"`
	Elapsed float64 `json:"elapsed_time"`
}

// mutant is one mutation that survived, with the source line it changes.
type mutant struct {
	file, kind, code string
	line, col        int
	rel              int // column from the line's first non-blank byte
}

type pkgReport struct {
	dir                                     string
	killed, lived, notCovered, timedOut, nv int
	survivors                               []mutant
}

func (p pkgReport) efficacy() float64 {
	if p.killed+p.lived == 0 {
		return 0
	}
	return 100 * float64(p.killed) / float64(p.killed+p.lived)
}

func main() {
	reasonsPath := flag.String("reasons", "", "equivalent mutants: TSV of package dir, file, mutator, source line, column in line, reason")
	out := flag.String("o", "", "markdown report to write")
	flag.Parse()
	reasons, err := readReasons(*reasonsPath)
	if err != nil {
		fail(err)
	}
	var reps []pkgReport
	for _, arg := range flag.Args() {
		dir, path, ok := strings.Cut(arg, "=")
		if !ok {
			fail(fmt.Errorf("argument %q: want <package dir>=<gremlins json>", arg))
		}
		r, err := load(dir, path)
		if err != nil {
			fail(err)
		}
		reps = append(reps, r)
	}
	printSummary(os.Stdout, reps)
	if *out == "" {
		return
	}
	old, err := os.ReadFile(*out)
	if err != nil && !os.IsNotExist(err) {
		fail(err)
	}
	f, err := os.Create(*out)
	if err != nil {
		fail(err)
	}
	unexplained := writeReport(f, merge(parseReport(string(old)), reps, reasons))
	if err := f.Close(); err != nil {
		fail(err)
	}
	fmt.Printf("wrote %s (%d surviving mutants without a reason)\n", *out, unexplained)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mutreport:", err)
	os.Exit(1)
}

func load(dir, path string) (pkgReport, error) {
	p := pkgReport{dir: filepath.Clean(dir)}
	b, err := os.ReadFile(path)
	if err != nil {
		return p, err
	}
	var r result
	if err := json.Unmarshal(b, &r); err != nil {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	for _, f := range r.Files {
		lines, err := readLines(filepath.Join(p.dir, f.Name))
		if err != nil {
			return p, err
		}
		for _, m := range f.Mutations {
			switch m.Status {
			case "KILLED":
				p.killed++
			case "LIVED":
				p.lived++
				code := ""
				rel := m.Column
				if m.Line-1 < len(lines) {
					raw := lines[m.Line-1]
					code = strings.TrimSpace(raw)
					rel = m.Column - (len(raw) - len(strings.TrimLeft(raw, " \t")))
				}
				p.survivors = append(p.survivors, mutant{file: f.Name, kind: m.Type, code: code, line: m.Line, col: m.Column, rel: rel})
			case "NOT COVERED":
				p.notCovered++
			case "TIMED OUT":
				p.timedOut++
			case "NOT VIABLE":
				p.nv++
			}
		}
	}
	sort.Slice(p.survivors, func(i, j int) bool {
		a, b := p.survivors[i], p.survivors[j]
		if a.file != b.file {
			return a.file < b.file
		}
		if a.line != b.line {
			return a.line < b.line
		}
		return a.col < b.col
	})
	return p, nil
}

func readLines(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return strings.Split(string(b), "\n"), nil
}

// key identifies a mutant by what it changes rather than where, so that
// reasons survive edits elsewhere in the file.
func key(dir, file, kind, code string, rel int) string {
	return strings.Join([]string{filepath.Clean(dir), file, kind, code, fmt.Sprint(rel)}, "\t")
}

func readReasons(path string) (map[string]string, error) {
	m := map[string]string{}
	if path == "" {
		return m, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			continue
		}
		parts := strings.Split(l, "\t")
		if len(parts) != 6 {
			return nil, fmt.Errorf("%s:%d: want 6 tab-separated fields, got %d", path, n, len(parts))
		}
		var rel int
		if _, err := fmt.Sscan(parts[4], &rel); err != nil {
			return nil, fmt.Errorf("%s:%d: column %q: %v", path, n, parts[4], err)
		}
		m[key(parts[0], parts[1], parts[2], parts[3], rel)] = parts[5]
	}
	return m, sc.Err()
}

func printSummary(w io.Writer, reps []pkgReport) {
	fmt.Fprintf(w, "%-10s %9s %7s %6s %12s %10s\n", "package", "efficacy", "killed", "lived", "not covered", "timed out")
	for _, p := range reps {
		fmt.Fprintf(w, "%-10s %8.1f%% %7d %6d %12d %10d\n", p.dir, p.efficacy(), p.killed, p.lived, p.notCovered, p.timedOut)
	}
}

// entry is one package's row of the table and its section of survivors,
// as markdown.
type entry struct {
	dir, row, section string
	unexplained       int
}

// parseReport reads the rows and sections of an earlier report, in order.
func parseReport(md string) []entry {
	var es []entry
	at := map[string]int{}
	get := func(dir string) *entry {
		i, ok := at[dir]
		if !ok {
			i = len(es)
			at[dir] = i
			es = append(es, entry{dir: dir})
		}
		return &es[i]
	}
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "| ") && !strings.HasPrefix(l, "| package |"):
			if f := strings.Split(l, "|"); len(f) > 2 {
				get(strings.TrimSpace(f[1])).row = l
			}
		case strings.HasPrefix(l, "## ") && strings.HasSuffix(l, ": surviving mutants"):
			dir := strings.TrimSuffix(strings.TrimPrefix(l, "## "), ": surviving mutants")
			j := i + 1
			for j < len(lines) && !strings.HasPrefix(lines[j], "## ") {
				j++
			}
			get(dir).section = strings.TrimRight(strings.Join(lines[i:j], "\n"), "\n")
			i = j - 1
		}
	}
	return es
}

// merge puts this run's packages in place of an earlier report's, and
// after them those the earlier report did not have.
func merge(old []entry, reps []pkgReport, reasons map[string]string) []entry {
	es := append([]entry(nil), old...)
	for _, p := range reps {
		e := render(p, reasons)
		i := slices.IndexFunc(es, func(o entry) bool { return o.dir == e.dir })
		if i < 0 {
			es = append(es, e)
		} else {
			es[i] = e
		}
	}
	return es
}

func render(p pkgReport, reasons map[string]string) entry {
	e := entry{dir: p.dir, row: fmt.Sprintf("| %s | %.1f%% | %d | %d | %d | %d |", p.dir, p.efficacy(), p.killed, p.lived, p.notCovered, p.timedOut)}
	var b strings.Builder
	fmt.Fprintf(&b, "## %s: surviving mutants\n\n", p.dir)
	if len(p.survivors) == 0 {
		b.WriteString("None.")
	}
	for i, m := range p.survivors {
		reason, ok := reasons[key(p.dir, m.file, m.kind, m.code, m.rel)]
		if !ok {
			reason = "**not analysed**"
			e.unexplained++
		}
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "- `%s:%d:%d` %s in %s: %s", m.file, m.line, m.col, m.kind, inlineCode(m.code), reason)
	}
	e.section = b.String()
	return e
}

func writeReport(w io.Writer, es []entry) (unexplained int) {
	fmt.Fprint(w, `# Mutation testing

`+"`make mutate`"+` runs [gremlins](https://github.com/go-gremlins/gremlins) over the
packages in `+"`MUTATE_PKGS`"+`: it changes one operator at a time in a package's code
(`+"`<`"+` into `+"`<=`"+`, `+"`+`"+` into `+"`-`"+`, a condition into its negation, ...),
runs that package's tests, and counts the mutant *killed* when a test fails,
*lived* when every test passes, *timed out* when the tests run past a bound
(the change made a loop endless or a test very slow), and *not covered* when
no test executes the line at all. Efficacy is killed / (killed + lived).

A surviving mutant is either a missing test or an *equivalent* change, one
no test can observe because the behaviour stays the same (a capacity hint, a
bound that only matters on a path that cannot be reached). Each survivor
below is listed with the reason it is equivalent, or marked as not analysed.
This page is generated by `+"`make mutate`"+`; reasons live in
`+"`scripts/mutreport/equivalent.txt`"+`.

| package | efficacy | killed | lived | not covered | timed out |
|---|---|---|---|---|---|
`)
	for _, e := range es {
		if e.row != "" {
			fmt.Fprintln(w, e.row)
		}
	}
	for _, e := range es {
		if e.section != "" {
			fmt.Fprintf(w, "\n%s\n", e.section)
		}
		unexplained += e.unexplained
	}
	fmt.Fprint(w, edgeScope)
	return unexplained
}

// edgeScope says what the edge row covers and how it is run.
const edgeScope = `
## edge: the transport-independent core

` + "`make mutate-edge`" + ` mutates only the proxy's transport-independent core,
` + "`edge/exchange.go`" + `, ` + "`edge/forward.go`" + ` and ` + "`edge/answers.go`" + ` (planning, retries,
kvca's own answers, the forwarding rules, request ids, the access log); the
event loops, TLS, configuration and server wiring are left out (the other
files of the package are passed to gremlins' ` + "`--exclude-files`" + `). The edge
suite without the race detector runs for about 35 s, so its slowest tests,
which exercise timing, descriptor and memory limits rather than the core,
are skipped (` + "`MUTATE_EDGE_SKIP`" + ` in the Makefile, passed as ` + "`-skip`" + ` through
` + "`GOFLAGS`" + `); what is left runs in under 10 s, and a run of the target takes
15 to 20 minutes with two workers on 2 cores. sched alone takes about as
long, so with edge in ` + "`MUTATE_PKGS`" + ` ` + "`make mutate`" + ` would run well past half an
hour: edge is a target of its own, and each of the two targets keeps the
other's rows on this page.

gremlins counts a mutant as covered when its position lies in a block of
the coverage profile; the case expressions of a tagless ` + "`switch`" + ` lie in none,
so their mutants (in ` + "`appendJSONString`" + ` and ` + "`pick`" + `) are reported not covered
although ` + "`TestAppendJSONString`" + ` and ` + "`TestPickWhenNoneIsLeft`" + ` run them.
`

// inlineCode quotes code for markdown, whose own backticks (Go raw strings)
// need a longer fence.
func inlineCode(s string) string {
	if strings.Contains(s, "`") {
		return "`` " + s + " ``"
	}
	return "`" + s + "`"
}
