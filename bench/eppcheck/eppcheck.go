// Package eppcheck checks an endpoint picker from the outside, as Envoy
// sees it: it plays Envoy's part of the ext_proc protocol against the
// picker, starts the model servers the picker is to pick from (kvca's
// mock engines on loopback), sends each request to the endpoint picked
// as Envoy would, feeds the answer back, and reports each rule of the
// endpoint picker protocol as PASS or FAIL (docs/endpoint-picker.md).
package eppcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Levels of a check: what the protocol requires of every picker, or
// what kvca's picker does beyond it (BUFFERED and STREAMED bodies, the
// subset as a string, surviving cancellations).
const (
	Must = "MUST"
	KVCA = "kvca"
)

// Config is a check run's configuration.
type Config struct {
	// Target is the picker's ext_proc gRPC address (host:port).
	Target string
	// Endpoints are the addresses the mock model servers listen on;
	// "127.0.0.1:0" takes any free port. Default three of those.
	Endpoints []string
	// Ready is called with the mock servers' addresses once they serve:
	// it is the moment to give them to the picker. Nil: they are printed
	// to Out and the picker's operator is expected to have given them.
	Ready func(endpoints []string) error
	// Wait bounds the wait for the picker's readiness. Default 60s.
	Wait time.Duration
	// Timeout bounds the wait for any one answer. Default 10s.
	Timeout time.Duration
	// MustOnly runs only the protocol's checks (for other pickers).
	MustOnly bool
	// Prefill are addresses for mock prefill workers, beside Endpoints
	// (then the decode workers): a disaggregated pool. Ready is given
	// them as "addr#role=prefill" and the others as "addr#role=decode",
	// the options of kvca's --backend; the picker must never pick them,
	// and must name one in x-prefiller-host-port.
	Prefill []string
	// Out receives progress; the report is Report's. Default io.Discard.
	Out io.Writer
}

// Result is one check's outcome; Err nil is a pass.
type Result struct {
	Name  string
	Level string
	Err   error
}

// Run checks the picker at cfg.Target. Its error is a failure to set up
// (the mock servers, the connection); the checks' failures are results.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if cfg.Target == "" {
		return nil, errors.New("eppcheck: no target")
	}
	if len(cfg.Endpoints) == 0 {
		cfg.Endpoints = []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}
	}
	if len(cfg.Endpoints) < 2 {
		return nil, errors.New("eppcheck: at least two endpoints, so that subsets and fallbacks mean something")
	}
	if cfg.Wait <= 0 {
		cfg.Wait = time.Minute
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	eng, err := startEngines(cfg.Endpoints)
	if err != nil {
		return nil, err
	}
	defer eng.close()
	if err := eng.startPrefills(cfg.Prefill); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Out, "eppcheck: mock model servers on %v\n", eng.addrs)
	ready := eng.addrs
	if len(eng.prefills) > 0 {
		fmt.Fprintf(cfg.Out, "eppcheck: mock prefill workers on %v\n", eng.prefills)
		ready = nil
		for _, a := range eng.addrs {
			ready = append(ready, a+"#role=decode")
		}
		for _, a := range eng.prefills {
			ready = append(ready, a+"#role=prefill")
		}
	}
	if cfg.Ready != nil {
		if err := cfg.Ready(ready); err != nil {
			return nil, fmt.Errorf("eppcheck: giving the picker its endpoints: %w", err)
		}
	} else {
		fmt.Fprintf(cfg.Out, "eppcheck: the picker at %s must route over exactly these endpoints\n", cfg.Target)
	}
	conn, err := grpc.NewClient(cfg.Target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return nil, fmt.Errorf("eppcheck: %w", err)
	}
	defer conn.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	defer tr.CloseIdleConnections()
	c := &checker{ctx: ctx, cfg: cfg, conn: conn, eng: eng, http: &http.Client{Transport: tr}}
	c.run()
	return c.results, nil
}

// Report prints one line per check and a summary, and returns how many
// failed.
func Report(w io.Writer, results []Result) (failed int) {
	for _, r := range results {
		if r.Err != nil {
			failed++
			fmt.Fprintf(w, "FAIL  %-4s  %s: %v\n", r.Level, r.Name, r.Err)
		} else {
			fmt.Fprintf(w, "PASS  %-4s  %s\n", r.Level, r.Name)
		}
	}
	fmt.Fprintf(w, "eppcheck: %d checks, %d failed\n", len(results), failed)
	return failed
}
