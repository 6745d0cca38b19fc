package main

import (
	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/edge"
)

// kdnServeFlags are serve's flags for kvca's own KDN gateway.
func kdnServeFlags() []cli.Flag { return nil }

// mountKDN mounts the KDN API on the admin listener of srv.
func mountKDN(c *cli.Context, srv *edge.Server) error { return nil }
