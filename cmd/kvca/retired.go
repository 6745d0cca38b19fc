package main

import (
	"log/slog"

	"github.com/urfave/cli/v2"
)

// retiredFlags are flags kvca no longer needs, still accepted for one
// release so that deployments written for an older kvca start; hidden
// from --help.
func retiredFlags() []cli.Flag {
	return []cli.Flag{
		// --io chose how the public listener was served; the event loops
		// are now the only way, and both values it took named them.
		&cli.StringFlag{Name: "io", Hidden: true, EnvVars: env("io")},
	}
}

// checkRetired refuses a retired flag's value that never meant what kvca
// does now, and warns of one that did: it is ignored, and goes in the next
// release.
func checkRetired(c *cli.Context, log *slog.Logger) error {
	if !c.IsSet("io") {
		return nil
	}
	switch v := c.String("io"); v {
	case "auto", "epoll":
		log.Warn("--io is retired and will be refused by the next release: the event loops serve every connection; remove it", "io", v)
		return nil
	case "fasthttp":
		return cli.Exit("kvca: --io fasthttp is gone: every connection is served by the event loops; remove --io", 1)
	default:
		return cli.Exit("kvca: --io is retired (it took auto or epoll, both the event loops); remove it", 1)
	}
}
