package main

import (
	"fmt"
	"strings"

	"github.com/kvca/kvca/kdn"
	"github.com/kvca/kvca/kdn/gateway"
	"github.com/urfave/cli/v2"
)

// kdnCommand groups the KDN v1 contract tools: validation of wire messages
// and the executable Mock/Legacy gateway workflows.
func kdnCommand() *cli.Command {
	return &cli.Command{
		Name:  "kdn",
		Usage: "KDN v1 wire contracts: validate messages, run the Mock/Legacy gateway workflows",
		Subcommands: []*cli.Command{
			kdnValidateCommand(),
			kdnWorkflowCommand(),
		},
	}
}

func kdnValidateCommand() *cli.Command {
	return &cli.Command{
		Name:      "validate",
		Usage:     "validate one JSON message from stdin and print its canonical form",
		UsageText: "kvca kdn validate --model NAME < message.json",
		Description: "Reads one JSON message on stdin and validates it as the named model.\n" +
			"Valid: exit 0, canonical JSON on stdout. Invalid: exit 1, one line on stderr\n" +
			"naming the broken rule (code, field, rule). Unknown model: exit 2.\n\n" +
			"Models:\n  " + strings.Join(kdn.ModelNames(), "\n  "),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Required: true, Usage: "reference model name (listed below)"},
		},
		Action: func(c *cli.Context) error {
			// The line is written here, once; cli.Exit with an empty message
			// makes urfave exit with the status without printing anything.
			code := kdn.ValidateCLI(c.String("model"), c.App.Reader, c.App.Writer, c.App.ErrWriter)
			if code != kdn.ExitValid {
				return cli.Exit("", code)
			}
			return nil
		},
	}
}

func kdnWorkflowCommand() *cli.Command {
	return &cli.Command{
		Name:      "workflow",
		Usage:     "run the CPU-only Mock (§10.1) or Legacy (§11.1) workflow, printing each step",
		UsageText: "kvca kdn workflow mock|legacy",
		Action: func(c *cli.Context) error {
			var steps []gateway.Step
			switch name := c.Args().First(); name {
			case "mock":
				steps = gateway.MockWorkflow()
			case "legacy":
				steps = gateway.LegacyWorkflow()
			default:
				fmt.Fprintln(c.App.ErrWriter, "kdn workflow: choose mock or legacy")
				return cli.Exit("", 2)
			}
			failed := gateway.PrintSteps(c.App.Writer, steps)
			if failed > 0 {
				fmt.Fprintf(c.App.ErrWriter, "kdn workflow: %d step(s) did not match the specification\n", failed)
				return cli.Exit("", 1)
			}
			return nil
		},
	}
}
