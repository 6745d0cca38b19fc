// Command kvca is a KV-cache-aware edge proxy for OpenAI-compatible inference servers.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/internal/cliflag"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "kvca:", err)
		os.Exit(1)
	}
}

func newApp() *cli.App {
	cmds := []*cli.Command{
		serveCommand(),
		inspectCommand(),
		mockCommand(),
		kdnCommand(),
		keysCommand(),
		movedCommand("bench"),
		movedCommand("demo"),
	}
	cliflag.Set(cmds)
	return &cli.App{
		Name:         "kvca",
		Usage:        "KV-cache-aware edge proxy for OpenAI-compatible LLM inference servers",
		Version:      version,
		Commands:     cmds,
		OnUsageError: cliflag.UsageError,
	}
}

// movedCommand answers a command that lives in kvca-bench, which links the
// embedded NATS server and the plotting library that the proxy does not.
func movedCommand(name string) *cli.Command {
	return &cli.Command{
		Name:            name,
		Hidden:          true,
		SkipFlagParsing: true,
		Action: func(*cli.Context) error {
			return fmt.Errorf("%s is a command of kvca-bench: make %s, or go run ./cmd/kvca-bench %s", name, name, name)
		},
	}
}
