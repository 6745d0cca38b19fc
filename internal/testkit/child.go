package testkit

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// childEnv tells a test binary that it runs as the child of ChildCommand,
// and which test it is there for.
const childEnv = "KVCA_TESTKIT_CHILD"

// IsChild reports whether this process is the child ChildCommand started
// for test t.
func IsChild(t testing.TB) bool { return os.Getenv(childEnv) == t.Name() }

// ChildCommand is the test binary set to run test t alone in a process of
// its own, where IsChild(t) holds: for a test that sets process-wide state
// (an rlimit) or measures the process (heap in use, CPU time), which the
// other tests of the package, their garbage and their goroutines would
// disturb. The caller starts it and wires its input and output.
func ChildCommand(t testing.TB) *exec.Cmd {
	t.Helper()
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	cmd := exec.Command(os.Args[0], "-test.run="+strings.Join(parts, "/"), "-test.count=1", "-test.v", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	return cmd
}

// Isolate runs test t again, alone, in a child process: in the child it
// returns true and the test goes on; in the parent it waits for the child,
// fails t with the child's output if the child failed, logs that output
// with -v, and returns false (the parent has nothing left to do).
//
//	if !testkit.Isolate(t) {
//		return
//	}
func Isolate(t *testing.T) bool {
	t.Helper()
	if IsChild(t) {
		return true
	}
	var out bytes.Buffer
	cmd := ChildCommand(t)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s in a child process: %v\n%s", t.Name(), err, out.String())
	}
	if testing.Verbose() {
		t.Logf("%s in a child process:\n%s", t.Name(), out.String())
	}
	return false
}
