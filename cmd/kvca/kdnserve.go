package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/kdn"
	"github.com/kvca/kvca/kdn/gateway"
	"github.com/kvca/kvca/kdn/live"
)

// kdnServeFlags are serve's flags for kvca's own KDN gateway.
func kdnServeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "runtime-profile", Value: string(kdn.ProfileAuto), Usage: "KDN runtime profile of the admin API: auto (resolves to v1, kvca's own gateway), v1, or test/mock (the deterministic Mock, for client development); legacy has no record source in kvca and is refused", EnvVars: env("runtime-profile")},
		&cli.StringFlag{Name: "compatibility-profile-id", Value: "kvca", Usage: "KDN compatibility profile `ID` naming this deployment; requests for another are incompatible", EnvVars: env("compatibility-profile-id")},
		&cli.StringFlag{Name: "state-dir", Usage: "`DIR` for the KDN knowledge store (registered prefixes, one JSON file each) and the endpoint generations (every start is a new generation for every endpoint); empty keeps the store in memory and starts generations at 1", EnvVars: env("state-dir")},
		&cli.IntFlag{Name: "max-pinned-blocks", Value: live.DefaultMaxPinnedBlocks, Usage: "most blocks KDN pins may hold at once; pins beyond are refused", EnvVars: env("max-pinned-blocks")},
	}
}

// resolveProfile resolves --runtime-profile at start-up; auto never
// reaches the wire.
func resolveProfile(s string) (kdn.RuntimeProfile, error) {
	switch kdn.RuntimeProfile(s) {
	case kdn.ProfileAuto, kdn.ProfileV1:
		return kdn.ProfileV1, nil
	case kdn.ProfileMock:
		return kdn.ProfileMock, nil
	case kdn.ProfileLegacy:
		return "", fmt.Errorf("--runtime-profile legacy: kvca has no legacy record source; use v1 (or auto)")
	}
	return "", fmt.Errorf("--runtime-profile %q: want auto, v1, legacy or test/mock", s)
}

// mountKDN mounts the KDN API on the admin listener of srv. Nothing it
// starts outlives the server unbounded: the v1 gateway runs no loop, and
// each operation's goroutine ends with the operation (bounded by its own
// timeout, or one TTL for a clear).
func mountKDN(c *cli.Context, srv *edge.Server) error {
	profile, err := resolveProfile(c.String("runtime-profile"))
	if err != nil {
		return err
	}
	if c.Int("max-pinned-blocks") < 1 {
		return fmt.Errorf("--max-pinned-blocks must be at least 1")
	}
	cfg := srv.Config()
	if cfg.AdminListen == "" {
		return nil // no admin listener, no KDN API
	}
	if profile == kdn.ProfileMock {
		m, err := gateway.New(gateway.MockSnapshot(), kdn.TransportMock, gateway.MockFixtures(), gateway.Options{})
		if err != nil {
			return err
		}
		srv.HandleAdmin(live.APIPrefix, live.APIHandler(m, nil, time.Now, cfg.Logger))
		return nil
	}
	g, err := live.New(srv, live.Options{
		CompatibilityProfileID: c.String("compatibility-profile-id"),
		StateDir:               c.String("state-dir"),
		MaxPinnedBlocks:        c.Int("max-pinned-blocks"),
		Logger:                 cfg.Logger,
	})
	if err != nil {
		return err
	}
	g.Mount()
	srv.OnShutdown(g.Close)
	return nil
}
