package main

import (
	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/cluster"
	"github.com/kvca/kvca/edge"
)

// clusterFlags are serve's flags for sharing state between replicas.
func clusterFlags() []cli.Flag { return cluster.Flags(env) }

// startCluster joins the cluster when configured; the returned stop
// function is called after the server has drained.
func startCluster(c *cli.Context, srv *edge.Server, cfg edge.Config) (stop func(), err error) {
	opt := cluster.OptionsFrom(c)
	if opt.URL == "" {
		return func() {}, nil
	}
	if cfg.Table.HashKey == "" {
		return nil, cluster.ErrNoHashKey
	}
	opt.Logger = cfg.Logger
	node, err := cluster.Join(srv, opt)
	if err != nil {
		return nil, err
	}
	if err := node.ShareAffinity(srv.Affinity()); err != nil {
		node.Close()
		return nil, err
	}
	if l := srv.Quota(); l != nil {
		stopQuota, err := node.ShareQuota(l, 0)
		if err != nil {
			node.Close()
			return nil, err
		}
		return func() { stopQuota(); node.Close() }, nil
	}
	return node.Close, nil
}
