// Package ttftflag holds the flags of the ttft policy's model and the
// resident-work bound (docs/placement.md), shared by kvca serve and the
// bench.
package ttftflag

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/internal/cliflag"
	"github.com/kvca/kvca/sched"
)

// Flags returns the flags; env names a flag's environment variable.
func Flags(env func(string) []string) []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "batch-capacity", Usage: "ttft: sequences each backend runs at once (vLLM's --max-num-seqs); 0: learned from first-byte latencies, or read from the engine's queue", EnvVars: env("batch-capacity")},
		&cli.GenericFlag{Name: "prefill-block-time", Value: cliflag.Duration(0), Usage: "ttft: a backend's prefill time per novel block of --block-size bytes; 0: learned", EnvVars: env("prefill-block-time")},
		&cli.GenericFlag{Name: "first-token-base", Value: cliflag.Duration(0), Usage: "ttft: a backend's time to first token with nothing to compute or wait for; 0: learned", EnvVars: env("first-token-base")},
		&cli.Float64Flag{Name: "resident-epsilon", Value: sched.DefaultResidentEpsilon, Usage: "place a new conversation only where it leaves the backend's resident work at most (1+E)x the mean (negative: no bound)", EnvVars: env("resident-epsilon")},
		&cli.GenericFlag{Name: "resident-window", Value: cliflag.Duration(0), Usage: "how long a backend's turns count as resident work (decay time constant); 0: three times the observed gap between a conversation's turns, at most --ttl", EnvVars: env("resident-window")},
	}
}

// From reads Flags; scale multiplies the durations (the bench replays
// time faster).
func From(c *cli.Context, scale float64) sched.TTFTConfig {
	d := func(name string) time.Duration { return time.Duration(float64(c.Duration(name)) * scale) }
	return sched.TTFTConfig{
		Capacity:        c.Int("batch-capacity"),
		BlockTime:       d("prefill-block-time"),
		Base:            d("first-token-base"),
		ResidentEpsilon: c.Float64("resident-epsilon"),
		ResidentWindow:  d("resident-window"),
	}
}
