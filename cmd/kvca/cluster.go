package main

import (
	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/edge"
)

// clusterFlags are serve's flags for sharing state between replicas.
func clusterFlags() []cli.Flag { return nil }

// startCluster joins the cluster when configured; the returned stop
// function is called after the server has drained.
func startCluster(c *cli.Context, srv *edge.Server, cfg edge.Config) (stop func(), err error) {
	return func() {}, nil
}
