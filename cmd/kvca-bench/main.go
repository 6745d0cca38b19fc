// Command kvca-bench measures kvca: the bench suite (a workload replayed
// through kvca in front of mock inference engines, once per policy) and the
// one-minute demo. It is a command of its own so that the kvca binary that
// runs at the edge links neither the embedded NATS server the clustered
// bench starts nor the plotting library of the charts.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/internal/cliflag"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "kvca-bench:", err)
		os.Exit(1)
	}
}

func newApp() *cli.App {
	cmds := []*cli.Command{benchCommand(), demoCommand(), eppCheckCommand(), pickerCostCommand()}
	cliflag.Set(cmds)
	return &cli.App{
		Name:         "kvca-bench",
		Usage:        "measure kvca: replay workloads through it in front of mock inference engines",
		Version:      version,
		Commands:     cmds,
		OnUsageError: cliflag.UsageError,
	}
}

// env names the KVCA_BENCH_<NAME> variable of a flag: the bench's own, so
// that an environment set up for kvca serve (KVCA_TTL, KVCA_BLOCK_SIZE, …)
// does not change what the bench measures.
func env(flag string) []string {
	return []string{"KVCA_BENCH_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}
