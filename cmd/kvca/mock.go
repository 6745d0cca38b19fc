package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/internal/cliflag"

	"github.com/kvca/kvca/bench/mock"
)

// mockEnv names the KVCA_MOCK_<NAME> variable of a mock flag. The mock
// has flags of the same names as serve's (--listen above all): with
// serve's KVCA_<NAME>, an environment set up for kvca serve would make a
// mock listen on the proxy's address.
func mockEnv(flag string) []string {
	return []string{"KVCA_MOCK_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

func mockCommand() *cli.Command {
	d := mock.New(mock.Config{}).Config()
	return &cli.Command{
		Name:  "mock",
		Usage: "run one mock OpenAI-compatible inference engine (chat, completions and responses; prefix KV cache, queueing, SSE, vLLM metrics, faults)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8000", Usage: "listen `ADDR`", EnvVars: mockEnv("listen")},
			&cli.StringFlag{Name: "name", Value: d.Name, Usage: "engine name (ids, metric label)", EnvVars: mockEnv("name")},
			&cli.StringSliceFlag{Name: "model", Value: cli.NewStringSlice(d.Models...), Usage: "served model name (repeatable)", EnvVars: mockEnv("model")},
			&cli.IntFlag{Name: "cache-tokens", Value: d.CacheTokens, Usage: "KV cache capacity in tokens (negative: no cache)", EnvVars: mockEnv("cache-tokens")},
			&cli.IntFlag{Name: "block-tokens", Value: d.BlockTokens, Usage: "tokens per KV cache block", EnvVars: mockEnv("block-tokens")},
			&cli.IntFlag{Name: "max-seqs", Value: d.MaxSeqs, Usage: "sequences running at once; the rest queue FIFO", EnvVars: mockEnv("max-seqs")},
			&cli.BoolFlag{Name: "priority", Usage: "queue by the body's priority field (lower first) and preempt a running sequence of lower priority for an arrival when every slot is taken, as SGLang with --enable-priority-scheduling", EnvVars: mockEnv("priority")},
			&cli.GenericFlag{Name: "prefill-overhead", Value: cliflag.Duration(d.PrefillOverhead), Usage: "fixed prefill cost per request", EnvVars: mockEnv("prefill-overhead")},
			&cli.GenericFlag{Name: "prefill-per-token", Value: cliflag.Duration(d.PrefillPerToken), Usage: "prefill cost per uncached prompt token", EnvVars: mockEnv("prefill-per-token")},
			&cli.GenericFlag{Name: "decode-per-token", Value: cliflag.Duration(d.DecodePerToken), Usage: "decode time per output token", EnvVars: mockEnv("decode-per-token")},
			&cli.GenericFlag{Name: "transfer-per-token", Value: cliflag.Duration(d.TransferPerToken), Usage: "a disaggregated fleet's decode request (vLLM's kv_transfer_params with do_remote_prefill) waits this per prompt token it lacks, in place of their prefill; a prefill request (do_remote_decode) answers with the transfer", EnvVars: mockEnv("transfer-per-token")},
			&cli.Float64Flag{Name: "time-scale", Value: d.TimeScale, Usage: "multiply every simulated duration (0.01: 100× faster)", EnvVars: mockEnv("time-scale")},
			&cli.IntFlag{Name: "default-max-tokens", Value: d.DefaultMaxTokens, Usage: "output tokens when a request sets no max_tokens", EnvVars: mockEnv("default-max-tokens")},
			&cli.Float64Flag{Name: "error-rate", Usage: "fraction of completions answered HTTP 500", EnvVars: mockEnv("error-rate")},
			&cli.GenericFlag{Name: "slow-start", Value: cliflag.Duration(0), Usage: "delay before response headers", EnvVars: mockEnv("slow-start")},
			&cli.IntFlag{Name: "kill-after-chunks", Usage: "close the connection after this many SSE events (0: never)", EnvVars: mockEnv("kill-after-chunks")},
			&cli.BoolFlag{Name: "fast", Usage: "no cache (and no cached-token count), no timing: fixed small responses, for proxy throughput tests", EnvVars: mockEnv("fast")},
		},
		Action: func(c *cli.Context) error {
			e := mock.New(mock.Config{
				Name:             c.String("name"),
				Models:           c.StringSlice("model"),
				CacheTokens:      c.Int("cache-tokens"),
				BlockTokens:      c.Int("block-tokens"),
				MaxSeqs:          c.Int("max-seqs"),
				Priority:         c.Bool("priority"),
				PrefillOverhead:  c.Duration("prefill-overhead"),
				PrefillPerToken:  c.Duration("prefill-per-token"),
				DecodePerToken:   c.Duration("decode-per-token"),
				TransferPerToken: c.Duration("transfer-per-token"),
				TimeScale:        c.Float64("time-scale"),
				DefaultMaxTokens: c.Int("default-max-tokens"),
				Faults: mock.Faults{
					ErrorRate:       c.Float64("error-rate"),
					SlowStart:       c.Duration("slow-start"),
					KillAfterChunks: c.Int("kill-after-chunks"),
				},
				Fast: c.Bool("fast"),
			})
			if err := e.Start(c.String("listen")); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "kvca mock %s listening on http://%s\n", e.Config().Name, e.Addr())
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			<-ctx.Done()
			st := e.Stats()
			fmt.Fprintf(os.Stderr, "kvca mock: stopping after %d requests, prefix cache hit rate %.1f%%\n", st.Requests, 100*st.HitRate())
			return e.Close()
		},
	}
}
