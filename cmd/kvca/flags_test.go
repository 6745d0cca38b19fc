package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/internal/cliflag"
)

// run runs kvca with args and returns everything it printed and its error.
func run(args ...string) (string, error) {
	app := newApp()
	var out bytes.Buffer
	app.Writer, app.ErrWriter = &out, &out
	err := app.Run(append([]string{"kvca"}, args...))
	return out.String(), err
}

// durationFlags are the names of cmd's duration flags. A cli.DurationFlag
// left among them fails the test: it would say "parse error" again.
func durationFlags(t *testing.T, cmd *cli.Command) []string {
	t.Helper()
	var names []string
	for _, f := range cmd.Flags {
		switch x := f.(type) {
		case *cli.DurationFlag:
			t.Errorf("kvca %s --%s is a cli.DurationFlag: use cli.GenericFlag{Value: cliflag.Duration(…)}", cmd.Name, x.Name)
		case *cli.GenericFlag:
			if _, ok := x.Value.(*cliflag.DurationValue); ok {
				names = append(names, x.Name)
			}
		}
	}
	return names
}

// TestDurationWithoutUnit: a bare number for any duration flag, as a flag,
// a KVCA_* variable or a --config setting, is refused with one sentence
// naming the flag and the missing unit, and no help page.
func TestDurationWithoutUnit(t *testing.T) {
	names := durationFlags(t, serveCommand())
	if len(names) < 10 {
		t.Fatalf("found %d duration flags on serve: %v", len(names), names)
	}
	cfg := filepath.Join(t.TempDir(), "kvca.yaml")
	for _, name := range names {
		want := `--` + name + `: "10" needs a unit (e.g. 10s, 5m)`
		out, err := run("serve", "--backend", "http://a:1", "--"+name, "10")
		if err == nil || err.Error() != want {
			t.Errorf("--%s 10: got %v, want %q", name, err, want)
		}
		if out != "" {
			t.Errorf("--%s 10 printed %d bytes (help?): %.80q", name, len(out), out)
		}

		variable := env(name)[0]
		t.Setenv(variable, "10")
		out, err = run("serve", "--backend", "http://a:1")
		wantEnv := `--` + name + ` (from ` + variable + `): "10" needs a unit (e.g. 10s, 5m)`
		if err == nil || err.Error() != wantEnv || out != "" {
			t.Errorf("%s=10: got %v (%d bytes printed), want %q", variable, err, len(out), wantEnv)
		}
		os.Unsetenv(variable)

		os.WriteFile(cfg, []byte(name+": 10\nbackend: http://a:1\n"), 0o644)
		_, err = run("serve", "--config", cfg)
		if err == nil || !strings.HasSuffix(err.Error(), name+`: "10" needs a unit (e.g. 10s, 5m)`) {
			t.Errorf("--config %s: 10: got %v", name, err)
		}
	}
	for _, name := range durationFlags(t, mockCommand()) {
		want := `--` + name + `: "5" needs a unit (e.g. 10s, 5m)`
		if _, err := run("mock", "--"+name, "5"); err == nil || err.Error() != want {
			t.Errorf("mock --%s 5: got %v, want %q", name, err, want)
		}
	}
}

// TestFlagMistakesAreOneSentence: the other mistakes the flag parser
// catches are explained the same way.
func TestFlagMistakesAreOneSentence(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--ttl", "soon"}, `--ttl: "soon" is not a duration (e.g. 300ms, 10s, 5m, 1h30m)`},
		{[]string{"serve", "--block-size", "big"}, `--block-size: "big" is not a whole number`},
		{[]string{"serve", "--pprof=maybe"}, `--pprof: "maybe" is not true or false`},
		{[]string{"serve", "--bakend", "http://a:1"}, `unknown flag --bakend (kvca serve --help lists them)`},
		{[]string{"serve", "--backend"}, `--backend needs a value`},
		{[]string{"mock", "--time-scale", "fast"}, `--time-scale: "fast" is not a number`},
		{[]string{"kdn", "validate", "--modle", "x"}, `unknown flag --modle (kvca kdn validate --help lists them)`},
	} {
		out, err := run(tc.args...)
		if err == nil || err.Error() != tc.want || out != "" {
			t.Errorf("%v: got %v (%d bytes printed), want %q", tc.args, err, len(out), tc.want)
		}
	}
	if _, err := run("serve", "--backend", "http://a:1", "--ttl", "90s", "--block-size", "12"); err == nil || !strings.Contains(err.Error(), "multiple of 8") {
		t.Errorf("a valid --ttl 90s: got %v, want the block size refused next", err)
	}
}

// TestEmptyHashKeyRefused: a key given but empty is a mistake (a secret
// that did not arrive), in every form; only a key not given is random.
func TestEmptyHashKeyRefused(t *testing.T) {
	const want = "--hash-key is empty"
	if _, err := run("serve", "--backend", "http://a:1", "--hash-key", ""); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf(`--hash-key "": got %v`, err)
	}
	cfg := filepath.Join(t.TempDir(), "kvca.yaml")
	os.WriteFile(cfg, []byte("hash-key: \"\"\nbackend: http://a:1\n"), 0o644)
	if _, err := run("serve", "--config", cfg); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf(`hash-key: "" in --config: got %v`, err)
	}
	t.Setenv("KVCA_HASH_KEY", "")
	if _, err := run("serve", "--backend", "http://a:1"); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf(`KVCA_HASH_KEY="": got %v`, err)
	}
	os.Unsetenv("KVCA_HASH_KEY")
	// Not given at all: accepted (the block size is the next mistake).
	if _, err := run("serve", "--backend", "http://a:1", "--block-size", "12"); err == nil || !strings.Contains(err.Error(), "multiple of 8") {
		t.Errorf("no --hash-key: got %v, want it accepted", err)
	}
}

// TestJSONLogDurationsInSeconds: JSON log lines carry durations as seconds.
func TestJSONLogDurationsInSeconds(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLoggerTo(&buf, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("draining", "timeout", 30*time.Second, "took", 1500*time.Millisecond, "n", 3)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	if line["timeout"] != 30.0 || line["took"] != 1.5 || line["n"] != 3.0 {
		t.Fatalf("got timeout=%v took=%v n=%v, want 30 1.5 3: %s", line["timeout"], line["took"], line["n"], buf.Bytes())
	}
	buf.Reset()
	log, _ = newLoggerTo(&buf, "info", "text")
	log.Info("draining", "timeout", 30*time.Second)
	if !strings.Contains(buf.String(), "timeout=30s") {
		t.Fatalf("text log: %s", buf.String())
	}
}

// TestMockReadsItsOwnVariables: kvca mock reads KVCA_MOCK_*, never serve's
// KVCA_* (an environment file for kvca serve would move the mock onto the
// proxy's port).
func TestMockReadsItsOwnVariables(t *testing.T) {
	cmd := mockCommand()
	for _, f := range cmd.Flags {
		ev, _ := f.(interface{ GetEnvVars() []string })
		if ev == nil {
			continue
		}
		for _, v := range ev.GetEnvVars() {
			if !strings.HasPrefix(v, "KVCA_MOCK_") {
				t.Errorf("mock flag %s reads %s", f.Names()[0], v)
			}
		}
	}
	listen := func() string {
		t.Helper()
		cmd := mockCommand()
		got := ""
		cmd.Action = func(c *cli.Context) error { got = c.String("listen"); return nil }
		app := &cli.App{Name: "kvca", Commands: []*cli.Command{cmd}}
		if err := app.Run([]string{"kvca", "mock"}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	t.Setenv("KVCA_LISTEN", "[::]:8080")
	if got := listen(); got != "127.0.0.1:8000" {
		t.Errorf("with KVCA_LISTEN set, the mock listens on %s", got)
	}
	t.Setenv("KVCA_MOCK_LISTEN", "127.0.0.1:18123")
	if got := listen(); got != "127.0.0.1:18123" {
		t.Errorf("with KVCA_MOCK_LISTEN set, the mock listens on %s", got)
	}
}

// TestBenchCommandsPointToKvcaBench: kvca bench and kvca demo live in
// kvca-bench; kvca says so instead of "no such command".
func TestBenchCommandsPointToKvcaBench(t *testing.T) {
	for _, name := range []string{"bench", "demo"} {
		_, err := run(name, "--engines", "4")
		if err == nil || !strings.Contains(err.Error(), "kvca-bench") {
			t.Errorf("kvca %s: got %v", name, err)
		}
	}
}

// TestBackendRoleFromConfig: a --config file's backends carry their role
// option as on the command line; a bad one is refused by name.
func TestBackendRoleFromConfig(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "kvca.yaml")
	os.WriteFile(cfg, []byte("backend: [\"http://a:1#llama,role=decode\", \"http://b:1#role=prefil\"]\n"), 0o644)
	_, err := run("serve", "--config", cfg)
	if err == nil || !strings.Contains(err.Error(), `role "prefil" is not one of prefill, decode, both`) {
		t.Fatalf("got %v", err)
	}
	_, err = run("serve", "--backend", "http://a:1#role=decode", "--pd-protocol", "nixl")
	if err == nil || !strings.Contains(err.Error(), "--pd-protocol") {
		t.Fatalf("got %v", err)
	}
}
