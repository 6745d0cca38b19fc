package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/bench/run"
	"github.com/kvca/kvca/bench/workload"
	"github.com/kvca/kvca/edge"
)

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "run kvca in front of four built-in mock engines with a short multi-turn workload and print what routing achieved",
		Description: `A one-minute bench: 4 mock engines with small KV caches, 120 multi-turn
conversations arriving over ~15 s, replayed once through kvca's own policies
and once through the usual baselines. The table shows the engines' prefix-cache
hit rate (against the workload's ideal), time to first token and balance.`,
		Action: func(c *cli.Context) error {
			d := edge.DefaultConfig()
			spec := run.Spec{
				TimeScale:    0.15,
				ArrivalScale: 1,
				Synth: workload.Synthetic{
					Seed: 7, Sessions: 120, Rate: 8, MinTurns: 3, MaxTurns: 7, ThinkTime: 4 * time.Second,
					SystemPrompts: 3, SystemPromptTokens: 512, UserTokens: 400, OutputTokens: 48, ToolRate: 0.2,
				},
				Run: run.Options{
					Engines: 4,
					Engine: mock.Config{
						CacheTokens: 60_000, BlockTokens: 16, MaxSeqs: 32,
						PrefillOverhead: 5 * time.Millisecond, PrefillPerToken: 100 * time.Microsecond,
						DecodePerToken: 10 * time.Millisecond, TimeScale: 0.15,
					},
					Policies: []string{"kvca-cost", "kvca", "round-robin", "least-loaded"},
					Progress: os.Stderr,
				},
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			factory := func(policy string, backends []string) (run.Proxy, error) {
				cfg := d
				cfg.Listen, cfg.AdminListen = "127.0.0.1:0", ""
				cfg.Backends, cfg.Routing.Policy = backends, policy
				s, err := edge.New(cfg)
				if err != nil {
					return nil, err
				}
				if err := s.Start(); err != nil {
					return nil, err
				}
				return benchProxy{s}, nil
			}
			fmt.Println("kvca demo: 4 mock engines, 120 multi-turn conversations; the same arrivals per policy")
			if err := run.Main(ctx, spec, factory, os.Stdout); err != nil {
				return err
			}
			fmt.Println(`
hit rate: share of prompt tokens the engines found in their KV cache (token weighted);
of ideal: against one engine with an infinite cache. kvca-cost (the default)
and kvca keep each conversation on the engine holding its prefix; round-robin
and least-loaded scatter turns, so engines recompute history and time to
first token grows. Full suite: make bench (Mooncake trace, 8 engines, every
policy and the precise baseline, charts).`)
			return nil
		},
	}
}
