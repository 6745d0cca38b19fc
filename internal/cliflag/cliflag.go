// Package cliflag holds what kvca's commands share about their flags: a
// duration value whose mistakes name the missing unit, and usage errors
// rewritten as one sentence naming the flag instead of a page of help.
package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// DurationValue is a flag.Value for durations. cli.DurationFlag reports a
// bare number ("--ttl 10") as "parse error" on the command line and in a
// --config file; this value says what is wrong in every form (flag,
// environment variable, config file), and c.Duration still reads it.
type DurationValue struct{ d time.Duration }

// Duration returns a DurationValue holding d, for cli.GenericFlag.Value.
func Duration(d time.Duration) *DurationValue { return &DurationValue{d: d} }

// Set parses s as a Go duration.
func (v *DurationValue) Set(s string) error {
	d, err := ParseDuration(s)
	if err != nil {
		return err
	}
	v.d = d
	return nil
}

func (v *DurationValue) String() string { return v.d.String() }

// Get returns the duration (flag.Getter).
func (v *DurationValue) Get() any { return v.d }

// ParseDuration is time.ParseDuration with an error that shows the fix.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err == nil {
		return d, nil
	}
	if _, numErr := strconv.ParseFloat(strings.TrimSpace(s), 64); numErr == nil {
		return 0, fmt.Errorf("%q needs a unit (e.g. 10s, 5m)", s)
	}
	return 0, fmt.Errorf("%q is not a duration (e.g. 300ms, 10s, 5m, 1h30m)", s)
}

var (
	// The standard flag package: a value its Set refused.
	badValueRE = regexp.MustCompile(`^invalid (?:value|boolean value) "(.*)" for (?:flag )?-{1,2}([A-Za-z0-9._-]+): (.*)$`)
	// urfave/cli: an environment variable its flag refused.
	badEnvRE = regexp.MustCompile(`^could not parse "(.*)" (?:from (.+) as value|as [a-z0-9]+ value from (.+)) for flag ([A-Za-z0-9._-]+): (.*)$`)
	quotedRE = regexp.MustCompile(`"([^"]+)"`)
	// The standard flag package: an unknown flag.
	unknownRE = regexp.MustCompile(`^flag provided but not defined: -{1,2}([A-Za-z0-9._-]+)$`)
	// The standard flag package: a flag that needs a value and has none.
	noArgRE = regexp.MustCompile(`^flag needs an argument: -{1,2}([A-Za-z0-9._-]+)$`)
)

// UsageError is an OnUsageError for every command: it turns what the flag
// parser says into one sentence that names the flag and the fix, without
// printing the command's help (which buries the sentence).
func UsageError(c *cli.Context, err error, _ bool) error {
	return Explain(commandName(c), flagKinds(c), err)
}

// Set installs UsageError on cmds and all their subcommands.
func Set(cmds []*cli.Command) {
	for _, cmd := range cmds {
		cmd.OnUsageError = UsageError
		Set(cmd.Subcommands)
	}
}

func commandName(c *cli.Context) string {
	app := "kvca"
	if c == nil {
		return app
	}
	if c.App != nil && c.App.Name != "" {
		app = c.App.Name
	}
	var names []string
	for _, l := range c.Lineage() {
		if l.Command != nil && l.Command.Name != "" {
			names = append([]string{l.Command.Name}, names...)
		}
	}
	if len(names) == 0 || names[0] != app { // the root command carries the app's name
		names = append([]string{app}, names...)
	}
	return strings.Join(names, " ")
}

// flagKinds maps each flag name of the command being run to its kind,
// which says how a refused value should be explained.
func flagKinds(c *cli.Context) map[string]string {
	kinds := map[string]string{}
	if c == nil || c.Command == nil {
		return kinds
	}
	for _, f := range c.Command.Flags {
		kind := "value"
		switch x := f.(type) {
		case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag:
			kind = "int"
		case *cli.Float64Flag:
			kind = "number"
		case *cli.BoolFlag:
			kind = "bool"
		case *cli.DurationFlag:
			kind = "duration"
		case *cli.GenericFlag:
			if _, ok := x.Value.(*DurationValue); ok {
				kind = "duration"
			}
		}
		for _, n := range f.Names() {
			kinds[n] = kind
		}
	}
	return kinds
}

// Explain rewrites a flag-parsing error of command cmd; kinds gives each
// flag's kind (int, number, bool, duration, value).
func Explain(cmd string, kinds map[string]string, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if m := badValueRE.FindStringSubmatch(msg); m != nil {
		return errors.New("--" + m[2] + ": " + reason(kinds[m[2]], m[1], m[3]))
	}
	if m := badEnvRE.FindStringSubmatch(msg); m != nil {
		source := m[2]
		if source == "" {
			source = m[3]
		}
		if q := quotedRE.FindStringSubmatch(source); q != nil {
			source = q[1] // the variable's (or file's) name alone
		}
		return fmt.Errorf("--%s (from %s): %s", m[4], source, reason(kinds[m[4]], m[1], m[5]))
	}
	if m := unknownRE.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("unknown flag --%s (%s --help lists them)", m[1], cmd)
	}
	if m := noArgRE.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("--%s needs a value", m[1])
	}
	return err
}

// reason explains why value was refused; detail is the parser's own words.
func reason(kind, value, detail string) string {
	switch kind {
	case "duration":
		if _, err := ParseDuration(value); err != nil {
			return err.Error()
		}
	case "int":
		if strings.Contains(detail, "range") {
			return fmt.Sprintf("%q is out of range", value)
		}
		return fmt.Sprintf("%q is not a whole number", value)
	case "number":
		return fmt.Sprintf("%q is not a number", value)
	case "bool":
		return fmt.Sprintf("%q is not true or false", value)
	}
	if detail == "parse error" {
		return fmt.Sprintf("%q is not a valid value", value)
	}
	return strings.TrimPrefix(detail, "time: ")
}

var _ flag.Getter = (*DurationValue)(nil)

// Change is one setting of a reload: its flag's name and whether its
// value differs.
type Change struct {
	Name   string
	Differ bool
}

// Changed names the settings that differ, in order (what a part reports
// a reload could not apply).
func Changed(cs ...Change) []string {
	var out []string
	for _, c := range cs {
		if c.Differ {
			out = append(out, c.Name)
		}
	}
	return out
}

// SplitList accepts both repeated flags and comma- or space-separated
// values (as environment variables carry them).
func SplitList(in []string) []string {
	var out []string
	for _, v := range in {
		out = append(out, strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })...)
	}
	return out
}
