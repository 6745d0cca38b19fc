// Command kvca is a KV-cache-aware edge proxy for OpenAI-compatible inference servers.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
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
	return &cli.App{
		Name:    "kvca",
		Usage:   "KV-cache-aware edge proxy for OpenAI-compatible LLM inference servers",
		Version: version,
		Commands: []*cli.Command{
			serveCommand(),
			inspectCommand(),
			mockCommand(),
			benchCommand(),
			demoCommand(),
			kdnCommand(),
			keysCommand(),
		},
	}
}
