package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// kdnGenerations runs `kvca serve` on stateDir in front of backends, reads
// every endpoint's generation from the KDN API (endpoint discovery and
// each endpoint's capability snapshot, which must agree), and stops it
// with SIGTERM.
func kdnGenerations(t *testing.T, bin, stateDir string, backends []string) map[string]int64 {
	t.Helper()
	pub, admin := freeAddr(t), freeAddr(t)
	args := []string{"serve", "--listen", pub, "--admin-listen", admin, "--log-level", "warn", "--state-dir", stateDir}
	for _, b := range backends {
		args = append(args, "--backend", b)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill()
	post := func(path, body string) (int, []byte) {
		resp, err := http.Post("http://"+admin+path, "application/json", strings.NewReader(body))
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	var status int
	var out []byte
	for deadline := time.Now().Add(10 * time.Second); ; {
		if status, out = post("/kdn/v1/get_lmcache_endpoints", `{"runtime_profile":"v1"}`); status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kvca serve did not answer endpoint discovery (last HTTP %d)", status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var eps struct {
		Outcome   string `json:"outcome"`
		Endpoints []struct {
			ID         string `json:"endpoint_id"`
			Generation int64  `json:"generation"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(out, &eps); err != nil || eps.Outcome != "success" || len(eps.Endpoints) != len(backends) {
		t.Fatalf("endpoints: %v %s", err, out)
	}
	gens := map[string]int64{}
	for _, e := range eps.Endpoints {
		status, snap := post("/kdn/v1/discover_capabilities?endpoint_id="+e.ID, "")
		var s struct {
			ContractVersion string `json:"contract_version"`
			Generation      int64  `json:"endpoint_generation"`
		}
		if status != 200 || json.Unmarshal(snap, &s) != nil || s.ContractVersion != "lmcache-gateway.v1" || s.Generation != e.Generation {
			t.Fatalf("capabilities of %s (generation %d): HTTP %d %s", e.ID, e.Generation, status, snap)
		}
		gens[e.ID] = e.Generation
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("kvca exited with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("kvca did not exit")
	}
	return gens
}

// TestKDNGenerationsSurviveRestart runs the real binary three times on one
// --state-dir: every start is a new generation for every endpoint, since
// kvca keeps no block table across a restart.
func TestKDNGenerationsSurviveRestart(t *testing.T) {
	bin := kvcaBinary(t)
	var backends []string
	for i := 0; i < 2; i++ {
		e := mock.New(mock.Config{})
		if err := e.Start("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		backends = append(backends, e.URL())
	}
	dir := t.TempDir()
	var prev map[string]int64
	for run := 1; run <= 3; run++ {
		gens := kdnGenerations(t, bin, dir, backends)
		for id, g := range gens {
			if g != int64(run) {
				t.Errorf("run %d: endpoint %s has generation %d, want %d (previous %d)", run, id, g, run, prev[id])
			}
		}
		prev = gens
	}
	if _, err := os.Stat(filepath.Join(dir, "generations.json")); err != nil {
		t.Fatal(err)
	}
}
