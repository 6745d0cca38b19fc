package cluster

import (
	"github.com/VictoriaMetrics/metrics"
)

// Drop reasons of kvca_cluster_dropped_total{reason}.
const (
	dropBufferFull   = iota // Learned found the pending buffer full
	dropPublish             // NATS refused a publication (reconnect buffer full, closed)
	dropStale               // a location older than its backend's last reset
	dropUnknown             // a backend this replica does not have
	dropMismatch            // a replica with another hash key, block size or CBR
	dropMalformed           // undecodable message
	dropSlowConsumer        // NATS dropped messages this replica read too slowly
	numDrops
)

var dropNames = [numDrops]string{"buffer_full", "publish_error", "stale", "unknown_backend", "config_mismatch", "malformed", "slow_consumer"}

// Message kinds, as the kind label.
var kindNames = [4]string{"", "locations", "load", "reset"}

// nodeMetrics live in the node's own set, written into its server's
// /metrics, so several nodes in one process (tests, bench) keep their
// series apart.
type nodeMetrics struct {
	set         *metrics.Set
	sent        [4]*metrics.Counter
	received    [4]*metrics.Counter
	applied     [4]*metrics.Counter
	sentBytes   [4]*metrics.Counter
	sentBlocks  *metrics.Counter
	deduped     *metrics.Counter
	applBlocks  *metrics.Counter
	resetBlocks *metrics.Counter
	dropped     [numDrops]*metrics.Counter
	lag         *metrics.PrometheusHistogram
}

func newNodeMetrics(n *Node) *nodeMetrics {
	s := metrics.NewSet()
	m := &nodeMetrics{set: s}
	for k := 1; k < len(kindNames); k++ {
		m.sent[k] = s.NewCounter(`kvca_cluster_messages_sent_total{kind="` + kindNames[k] + `"}`)
		m.received[k] = s.NewCounter(`kvca_cluster_messages_received_total{kind="` + kindNames[k] + `"}`)
		m.applied[k] = s.NewCounter(`kvca_cluster_messages_applied_total{kind="` + kindNames[k] + `"}`)
		m.sentBytes[k] = s.NewCounter(`kvca_cluster_sent_bytes_total{kind="` + kindNames[k] + `"}`)
	}
	m.sentBlocks = s.NewCounter("kvca_cluster_sent_blocks_total")
	m.deduped = s.NewCounter("kvca_cluster_deduplicated_blocks_total")
	m.applBlocks = s.NewCounter("kvca_cluster_applied_blocks_total")
	m.resetBlocks = s.NewCounter("kvca_cluster_reset_dropped_locations_total")
	for i, name := range dropNames {
		m.dropped[i] = s.NewCounter(`kvca_cluster_dropped_total{reason="` + name + `"}`)
	}
	m.lag = s.NewPrometheusHistogramExt("kvca_cluster_lag_seconds",
		[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30})
	s.NewGauge("kvca_cluster_peers", func() float64 { return float64(n.livePeers.Load()) })
	s.NewGauge("kvca_cluster_connected", func() float64 {
		if n.nc != nil && n.nc.IsConnected() {
			return 1
		}
		return 0
	})
	s.NewGauge("kvca_cluster_pending_blocks", func() float64 {
		n.buf.mu.Lock()
		defer n.buf.mu.Unlock()
		return float64(len(n.buf.cur.hashes))
	})
	return m
}
