package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// kdnVector is one golden vector; tests read the project's copy only.
type kdnVector struct {
	Name      string          `json:"name"`
	Model     string          `json:"model"`
	JSON      json.RawMessage `json:"json"`
	Valid     bool            `json:"valid"`
	Canonical *string         `json:"canonical"`
}

func (v kdnVector) input(t *testing.T) []byte {
	if len(v.JSON) > 0 && v.JSON[0] == '"' { // raw, possibly malformed, bytes
		var s string
		if err := json.Unmarshal(v.JSON, &s); err != nil {
			t.Fatal(err)
		}
		return []byte(s)
	}
	return v.JSON
}

// kdnRejection is the error an invalid vector must be rejected with.
type kdnRejection struct {
	Code  string `json:"code"`
	Field string `json:"field"`
	Rule  string `json:"rule"`
}

// line is how the validate command prints it (a message follows).
func (r kdnRejection) line() string {
	f := r.Field
	if f == "" {
		f = "$"
	}
	return "code=" + r.Code + " field=" + f + " rule=" + r.Rule + ": "
}

func loadKDNRejections(t *testing.T) map[string]kdnRejection {
	data, err := os.ReadFile(filepath.Join("..", "..", "kdn", "testdata", "rejections.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Rejections map[string]kdnRejection `json:"rejections"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	return f.Rejections
}

func loadKDNVectors(t *testing.T) []kdnVector {
	data, err := os.ReadFile(filepath.Join("..", "..", "kdn", "testdata", "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []kdnVector `json:"cases"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	return f.Cases
}

// runKDN runs `kvca <args>` in-process through urfave/cli, with the exit
// handler captured instead of calling os.Exit.
func runKDN(t *testing.T, stdin []byte, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := &cli.App{
		Name:           "kvca",
		Commands:       []*cli.Command{kdnCommand()},
		Reader:         bytes.NewReader(stdin),
		Writer:         &out,
		ErrWriter:      &errOut,
		ExitErrHandler: func(*cli.Context, error) {},
	}
	err := app.Run(append([]string{"kvca"}, args...))
	var ec cli.ExitCoder
	switch {
	case err == nil:
		code = 0
	case errors.As(err, &ec):
		code = ec.ExitCode()
		if err.Error() != "" {
			t.Errorf("exit error carries a message %q that main would print a second time", err.Error())
		}
	default:
		code = -1
		errOut.WriteString(err.Error())
	}
	return code, out.String(), errOut.String()
}

func checkValidateResult(t *testing.T, v kdnVector, want map[string]kdnRejection, code int, stdout, stderr string) {
	t.Helper()
	if v.Valid {
		if code != 0 || stderr != "" {
			t.Fatalf("valid vector: exit %d, stderr %q", code, stderr)
		}
		if v.Canonical != nil && stdout != *v.Canonical {
			t.Fatalf("stdout is not the canonical form\n got: %s\nwant: %s", stdout, *v.Canonical)
		}
		if !json.Valid([]byte(stdout)) {
			t.Fatalf("stdout is not JSON: %q", stdout)
		}
		return
	}
	if code != 1 || stdout != "" {
		t.Fatalf("invalid vector: exit %d, stdout %q", code, stdout)
	}
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") ||
		!strings.Contains(stderr, "code=") || !strings.Contains(stderr, "field=") || !strings.Contains(stderr, "rule=") {
		t.Fatalf("stderr must be one line naming code, field and rule; got %q", stderr)
	}
	r, ok := want[v.Name]
	if !ok {
		t.Fatalf("no expected rejection for invalid vector %s", v.Name)
	}
	if !strings.Contains(stderr, ": "+r.line()) {
		t.Fatalf("rejected as %q, want %q...", stderr, r.line())
	}
}

func TestKDNValidateVectors(t *testing.T) {
	want := loadKDNRejections(t)
	for _, v := range loadKDNVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			code, stdout, stderr := runKDN(t, v.input(t), "kdn", "validate", "--model", v.Model)
			checkValidateResult(t, v, want, code, stdout, stderr)
		})
	}
}

func TestKDNValidateUnknownModel(t *testing.T) {
	code, stdout, stderr := runKDN(t, []byte(`{}`), "kdn", "validate", "--model", "NoSuchModel")
	if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("exit %d stdout %q stderr %q", code, stdout, stderr)
	}
}

func TestKDNValidateHelpListsModels(t *testing.T) {
	_, stdout, _ := runKDN(t, nil, "kdn", "validate", "--help")
	for _, m := range []string{"LookupArtifactRequest", "CapabilitySnapshot", "ResolveKnowledgeResponse", "TokenCoverage"} {
		if !strings.Contains(stdout, m) {
			t.Errorf("--help does not list %s", m)
		}
	}
}

func TestKDNWorkflowCommand(t *testing.T) {
	for _, name := range []string{"mock", "legacy"} {
		code, stdout, stderr := runKDN(t, nil, "kdn", "workflow", name)
		if code != 0 || stderr != "" || !strings.Contains(stdout, ", 0 failed") {
			t.Fatalf("%s: exit %d stderr %q\n%s", name, code, stderr, stdout)
		}
	}
	if code, _, _ := runKDN(t, nil, "kdn", "workflow", "nope"); code != 2 {
		t.Fatalf("unknown workflow: exit %d, want 2", code)
	}
}

// TestKDNValidateBinary pipes every vector through the real binary, so
// main's own error printing and exit path are covered too.
func TestKDNValidateBinary(t *testing.T) {
	bin := kvcaBinary(t)
	want := loadKDNRejections(t)
	for _, v := range loadKDNVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			cmd := exec.Command(bin, "kdn", "validate", "--model", v.Model)
			cmd.Stdin = bytes.NewReader(v.input(t))
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			checkValidateResult(t, v, want, code, out.String(), errOut.String())
		})
	}
}
