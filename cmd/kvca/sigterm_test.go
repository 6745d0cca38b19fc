package main

import (
	"bufio"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
)

// TestServeSIGTERMDrains runs the real binary: on SIGTERM under a live
// stream it refuses new connections, lets the stream finish, and exits 0.
func TestServeSIGTERMDrains(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the kvca binary")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	bin := filepath.Join(t.TempDir(), "kvca")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	e := mock.New(mock.Config{DecodePerToken: 40 * time.Millisecond, PrefillPerToken: time.Microsecond})
	if err := e.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "serve", "--listen", addr, "--admin-listen", "", "--backend", e.URL(),
		"--shutdown-timeout", "20s", "--log-level", "warn")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if r, err := http.Get("http://" + addr + "/ready"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("kvca serve did not become ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
	body := `{"model":"mock","stream":true,"max_tokens":25,"messages":[{"role":"user","content":"count slowly please"}]}`
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// New connections are refused while the stream drains.
	refused := false
	for i := 0; i < 100 && !refused; i++ {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			refused = true
			break
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	if !refused {
		t.Fatal("new connections still accepted after SIGTERM")
	}
	last := ""
	for {
		line, err := r.ReadString('\n')
		if s := strings.TrimSpace(line); s != "" {
			last = s
		}
		if err != nil {
			break
		}
	}
	resp.Body.Close()
	if last != "data: [DONE]" {
		t.Fatalf("in-flight stream cut by SIGTERM; last line %q", last)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("kvca exited with %v, want 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("kvca did not exit after draining")
	}
}
