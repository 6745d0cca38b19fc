package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/bench/pickercost"
	"github.com/kvca/kvca/internal/cliflag"
)

// pickerCostCommand measures kvca's endpoint picker against its proxy in
// one kvca process (bench/pickercost). It takes a kvca binary rather than
// building one, so that what it measures is the binary that is deployed.
func pickerCostCommand() *cli.Command {
	return &cli.Command{
		Name:  "picker-cost",
		Usage: "measure kvca's CPU per request and added latency as endpoint picker (ext_proc) against as proxy, in one run",
		Description: `Starts mock engines on loopback and one kvca serve (--kvca, e.g. bin/kvca from
make build, or go build -o bin/kvca ./cmd/kvca) with both --listen and
--ext-proc on free loopback ports and the engines as backends. For each body
size, sends the same kind of chat conversations (distinct, with follow-ups,
half streamed) straight to the engines (direct), through kvca's listener
(proxy), and through its ext_proc server playing Envoy in FULL_DUPLEX_STREAMED
mode then to the endpoint picked (picker). Prints a Markdown table of kvca's
CPU time per request (/proc, utime+stime) and latency percentiles; exits
non-zero if any request failed.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "kvca", Value: "bin/kvca", Usage: "the kvca binary to measure", EnvVars: env("kvca")},
			&cli.StringFlag{Name: "sizes", Value: "1KB,128KB,512KB", Usage: "comma-separated mean request body sizes (B, KB, MB)", EnvVars: env("sizes")},
			&cli.IntFlag{Name: "requests", Usage: "requests per size and mode; 0: 4000 for small bodies, fewer as they grow (about 128 MiB a mode, at least 200)", EnvVars: env("requests")},
			&cli.IntFlag{Name: "concurrency", Value: 8, Usage: "requests in flight at once", EnvVars: env("concurrency")},
			&cli.IntFlag{Name: "engines", Value: 3, Usage: "mock engines behind kvca", EnvVars: env("engines")},
			&cli.GenericFlag{Name: "timeout", Value: cliflag.Duration(30 * time.Second), Usage: "bound on one request", EnvVars: env("timeout")},
			&cli.StringFlag{Name: "modes", Value: "direct,proxy,picker", Usage: "comma-separated modes to run (one alone: to profile kvca in it)", EnvVars: env("modes")},
			&cli.StringSliceFlag{Name: "kvca-arg", Usage: "an argument added to kvca serve's, after the bench's own (repeatable; e.g. --kvca-arg=--admin-listen=127.0.0.1:6060 --kvca-arg=--pprof to profile it)", EnvVars: env("kvca-arg")},
		},
		Action: func(c *cli.Context) error {
			sizes, err := pickercost.ParseSizes(c.String("sizes"))
			if err != nil {
				return cli.Exit("picker-cost: --sizes: "+err.Error(), 2)
			}
			if c.Int("engines") < 1 || c.Int("concurrency") < 1 || c.Int("requests") < 0 {
				return cli.Exit("picker-cost: --engines and --concurrency must be at least 1, --requests at least 0", 2)
			}
			if _, err := os.Stat(c.String("kvca")); err != nil {
				return cli.Exit("picker-cost: --kvca: "+err.Error()+" (make build, or go build -o bin/kvca ./cmd/kvca)", 2)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			engines, err := pickercost.Engines(c.Int("engines"))
			if err != nil {
				return err
			}
			defer func() {
				for _, e := range engines {
					e.Close()
				}
			}()
			var backends []string
			for _, e := range engines {
				backends = append(backends, e.URL())
			}
			kvca, err := pickercost.StartKvca(ctx, c.String("kvca"), backends, c.StringSlice("kvca-arg"), os.Stderr)
			if err != nil {
				return err
			}
			defer kvca.Stop()
			fmt.Fprintf(os.Stderr, "picker-cost: %s\n", strings.Join(kvca.Args, " "))
			rows, err := pickercost.Run(ctx, pickercost.Config{
				Sizes:       sizes,
				Requests:    c.Int("requests"),
				Concurrency: c.Int("concurrency"),
				Timeout:     c.Duration("timeout"),
				Modes:       strings.Split(c.String("modes"), ","),
				Progress:    os.Stderr,
			}, kvca.Target, engines)
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			return pickercost.Table(os.Stdout, rows)
		},
	}
}
