package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/eppcheck"
	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/epp"
)

// TestPickerPassesEppCheck: kvca's real request lifecycle behind the
// ext_proc server passes every check of the endpoint picker conformance
// suite, which plays Envoy against mock model servers (the protocol's
// MUSTs and kvca's own), and every request's load is released once it
// ended.
func TestPickerPassesEppCheck(t *testing.T) {
	srv, res := runEppCheck(t, func(*edge.Config) {}, eppcheck.Config{})
	var report bytes.Buffer
	if failed := eppcheck.Report(&report, res); failed != 0 || len(res) < 20 {
		t.Fatalf("%d of %d checks failed:\n%s", failed, len(res), report.String())
	}
	// Cancelled streams end on the server's side a moment after the
	// check saw them go: wait (bounded) for the last release.
	deadline := time.Now().Add(5 * time.Second)
	for {
		busy := false
		for _, b := range srv.Scheduler().Backends {
			if b.Active() != 0 || b.Prefill() != 0 {
				busy = true
			}
		}
		if !busy {
			break
		}
		if time.Now().After(deadline) {
			for _, b := range srv.Scheduler().Backends {
				t.Errorf("backend %s: active %d prefill %d after every stream ended", b.Name, b.Active(), b.Prefill())
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPickerPassesEppCheckDisaggregated: the same over a disaggregated
// pool (prefill workers beside the decode endpoints): picks name decode
// endpoints, the prefill worker goes in x-prefiller-host-port.
func TestPickerPassesEppCheckDisaggregated(t *testing.T) {
	_, res := runEppCheck(t, func(cfg *edge.Config) { cfg.PD.Threshold = 16 },
		eppcheck.Config{Prefill: []string{"127.0.0.1:0", "127.0.0.1:0"}})
	var report bytes.Buffer
	failed := eppcheck.Report(&report, res)
	if failed != 0 || !strings.Contains(report.String(), "PASS  kvca  disaggregation (buffered)") {
		t.Fatalf("%d of %d checks failed:\n%s", failed, len(res), report.String())
	}
}

// runEppCheck runs the conformance suite, with ec's settings, against
// kvca's ext_proc server in front of a kvca configured by mod; the
// server stays up until the test ends.
func runEppCheck(t *testing.T, mod func(*edge.Config), ec eppcheck.Config) (*edge.Server, []eppcheck.Result) {
	t.Helper()
	cfg := edge.DefaultConfig()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", ""
	cfg.Backends = []string{"http://127.0.0.1:9"} // replaced by the check's engines
	cfg.HealthInterval = 0
	mod(&cfg)
	srv, err := edge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxy := pickerProxy{srv.Picker()}
	ps := epp.New(proxy, epp.Config{ReadyEvery: 50 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- ps.Serve(ln) }()
	t.Cleanup(func() {
		ps.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	ec.Target, ec.Ready, ec.Wait = ln.Addr().String(), proxy.SetEndpoints, 10*time.Second
	res, err := eppcheck.Run(context.Background(), ec)
	if err != nil {
		t.Fatal(err)
	}
	return srv, res
}
