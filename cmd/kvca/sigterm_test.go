package main

import (
	"bufio"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/internal/testkit"
)

// TestServeSIGTERMDrains runs the real binary: on SIGTERM under a live
// stream it refuses new connections, lets the stream finish, and exits 0.
func TestServeSIGTERMDrains(t *testing.T) {
	bin := kvcaBinary(t)
	e := testkit.Start(t, mock.New(mock.Config{DecodePerToken: 40 * time.Millisecond, PrefillPerToken: time.Microsecond}))
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
	testkit.WaitUntil(t, "kvca serve to be ready", func() bool {
		r, err := http.Get("http://" + addr + "/ready")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	})
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
	testkit.WaitUntil(t, "new connections to be refused after SIGTERM", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
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
