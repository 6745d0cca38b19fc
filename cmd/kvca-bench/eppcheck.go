package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/bench/eppcheck"
	"github.com/kvca/kvca/internal/cliflag"
)

// eppCheckCommand checks an endpoint picker over ext_proc as Envoy would
// (bench/eppcheck). It is in kvca-bench, not kvca, because it starts
// mock model servers and plays the gateway: test equipment.
func eppCheckCommand() *cli.Command {
	return &cli.Command{
		Name:  "epp-check",
		Usage: "check an endpoint picker (kvca serve --ext-proc, or any other) against the endpoint picker protocol, playing Envoy's part",
		Description: `Starts mock model servers on the --endpoints addresses, waits for the picker
to report ready, then sends it requests over ext_proc in FULL_DUPLEX_STREAMED,
BUFFERED and STREAMED body modes, with and without subset hints; sends each
request to the endpoint picked as Envoy would and feeds the answer back with
the served endpoint, at a fallback too (the conversation's next turn must be
picked where its last was served, in every body mode); cancels streams
mid-body and mid-response; and checks the health services. With
--prefill-endpoints the pool is disaggregated: picks must name decode
endpoints only and the prefill worker in x-prefiller-host-port. Start the picker first with exactly these endpoints as
its model servers, e.g.
  kvca serve --ext-proc 127.0.0.1:9002 --backend http://127.0.0.1:18001 --backend http://127.0.0.1:18002 --backend http://127.0.0.1:18003
Prints PASS or FAIL per check; exits 1 if any failed.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "target", Required: true, Usage: "the picker's ext_proc gRPC address (host:port)", EnvVars: env("target")},
			&cli.StringFlag{Name: "endpoints", Value: "127.0.0.1:18001,127.0.0.1:18002,127.0.0.1:18003", Usage: "comma-separated loopback addresses the mock model servers listen on: the endpoints the picker must pick from", EnvVars: env("endpoints")},
			&cli.GenericFlag{Name: "wait", Value: cliflag.Duration(time.Minute), Usage: "how long to wait for the picker's readiness", EnvVars: env("wait")},
			&cli.GenericFlag{Name: "timeout", Value: cliflag.Duration(10 * time.Second), Usage: "how long to wait for any one answer of the picker", EnvVars: env("timeout")},
			&cli.BoolFlag{Name: "must-only", Usage: "run only the protocol's checks, not those of kvca's own behaviour (for other pickers)", EnvVars: env("must-only")},
			&cli.StringFlag{Name: "prefill-endpoints", Usage: "comma-separated loopback addresses for mock prefill workers: the pool is disaggregated (the picker must take these as prefill workers, --endpoints as decode workers), and the picker must name one in x-prefiller-host-port and never pick it", EnvVars: env("prefill-endpoints")},
		},
		Action: func(c *cli.Context) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, err := eppcheck.Run(ctx, eppcheck.Config{
				Target:    c.String("target"),
				Endpoints: cliflag.SplitList([]string{c.String("endpoints")}),
				Wait:      c.Duration("wait"),
				Timeout:   c.Duration("timeout"),
				MustOnly:  c.Bool("must-only"),
				Prefill:   cliflag.SplitList([]string{c.String("prefill-endpoints")}),
				Out:       os.Stderr,
			})
			if err != nil {
				return err
			}
			if failed := eppcheck.Report(os.Stdout, res); failed > 0 {
				return cli.Exit(fmt.Sprintf("epp-check: %d of %d checks failed", failed, len(res)), 1)
			}
			return nil
		},
	}
}
