package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/internal/testkit"
)

// TestServeReloadsConfig runs the real binary: SIGHUP and a change of the
// --config file re-read it and apply the backend list live, name the
// settings that need a restart, and keep the configuration in force when
// the new one is invalid.
func TestServeReloadsConfig(t *testing.T) {
	bin := kvcaBinary(t)
	e1 := testkit.Start(t, mock.New(mock.Config{}))
	e2 := testkit.Start(t, mock.New(mock.Config{}))
	conf := filepath.Join(t.TempDir(), "kvca.yaml")
	write := func(s string) {
		t.Helper()
		// Write then rename, as configuration management does, so the
		// watcher never reads half a file.
		tmp := conf + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, conf); err != nil {
			t.Fatal(err)
		}
	}
	write("backend: [" + e1.URL() + "]\nttl: 5m\n")
	addr, admin := freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin, "serve", "--listen", addr, "--admin-listen", admin, "--config", conf,
		"--tls-reload-interval", "100ms", "--health-interval", "200ms")
	// The test's own KVCA_* variables would win over the file.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	logs := &testkit.LogBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	backends := func() []string {
		r, err := http.Get("http://" + admin + "/admin/state")
		if err != nil {
			return nil
		}
		defer r.Body.Close()
		var st edge.State
		if json.NewDecoder(r.Body).Decode(&st) != nil {
			return nil
		}
		var out []string
		for _, b := range st.Backends {
			out = append(out, b.URL)
		}
		return out
	}
	is := func(want ...string) func() bool {
		return func() bool { return strings.Join(backends(), " ") == strings.Join(want, " ") }
	}
	testkit.WaitUntil(t, "kvca serving e1", is(e1.URL()))

	write("backend: [" + e1.URL() + ", " + e2.URL() + "]\nttl: 5m\nblock-size: 128\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.WaitUntil(t, "e2 added", is(e1.URL(), e2.URL()))
	testkit.WaitUntil(t, "the restart-only setting named", func() bool {
		return strings.Contains(logs.String(), "take effect only at a restart") && strings.Contains(logs.String(), "block-size")
	})

	// No signal: the file's change is enough.
	write("backend: [" + e2.URL() + "]\nttl: 5m\nblock-size: 128\n")
	testkit.WaitUntil(t, "e1 removed on the file's change", is(e2.URL()))

	write("backend: [" + e1.URL() + "]\nttl: 10\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.WaitUntil(t, "the invalid configuration refused", func() bool {
		return strings.Contains(logs.String(), "configuration not reloaded")
	})
	if got := backends(); len(got) != 1 || got[0] != e2.URL() {
		t.Fatalf("backends %v after an invalid configuration, want [%s]", got, e2.URL())
	}
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"mock","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d after reloads", resp.StatusCode)
	}
}
