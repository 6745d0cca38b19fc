package main

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/sched"
)

// ttftFlags set the ttft policy's model where it is known and the
// resident-work bound (docs/placement.md).
func ttftFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "batch-capacity", Usage: "ttft: sequences each backend runs at once (vLLM's --max-num-seqs); 0: learned from first-byte latencies, or read from the engine's queue", EnvVars: env("batch-capacity")},
		&cli.DurationFlag{Name: "prefill-block-time", Usage: "ttft: a backend's prefill time per novel block of --block-size bytes; 0: learned", EnvVars: env("prefill-block-time")},
		&cli.DurationFlag{Name: "first-token-base", Usage: "ttft: a backend's time to first token with nothing to compute or wait for; 0: learned", EnvVars: env("first-token-base")},
		&cli.Float64Flag{Name: "resident-epsilon", Value: sched.DefaultResidentEpsilon, Usage: "place a new conversation only where it leaves the backend's resident work at most (1+E)x the mean (negative: no bound)", EnvVars: env("resident-epsilon")},
		&cli.DurationFlag{Name: "resident-window", Usage: "how long a backend's turns count as resident work (decay time constant); 0: three times the observed gap between a conversation's turns, at most --ttl", EnvVars: env("resident-window")},
	}
}

// ttftFrom reads ttftFlags; scale multiplies the durations (the bench
// replays time faster).
func ttftFrom(c *cli.Context, scale float64) sched.TTFTConfig {
	d := func(name string) time.Duration { return time.Duration(float64(c.Duration(name)) * scale) }
	return sched.TTFTConfig{
		Capacity:        c.Int("batch-capacity"),
		BlockTime:       d("prefill-block-time"),
		Base:            d("first-token-base"),
		ResidentEpsilon: c.Float64("resident-epsilon"),
		ResidentWindow:  d("resident-window"),
	}
}

// applyTTFT gives the scheduler cfg.TTFT and its metrics to /metrics.
func applyTTFT(srv *edge.Server, cfg edge.Config) error {
	sc := srv.Scheduler()
	if err := sc.SetTTFT(cfg.TTFT); err != nil {
		return err
	}
	srv.AddMetrics(sc.WriteTTFTMetrics)
	return nil
}
