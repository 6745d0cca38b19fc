package cluster

// Stats is a snapshot of a node's counters, for tests and the bench; the
// same numbers are exported on /metrics.
type Stats struct {
	Connected      bool
	Peers          int
	SentMessages   uint64 // all kinds
	SentLocations  uint64 // location messages
	SentBytes      uint64 // all kinds
	SentLocBytes   uint64 // location messages
	SentBlocks     uint64
	DedupedBlocks  uint64
	Received       uint64 // messages from peers, all kinds
	AppliedBlocks  uint64
	AppliedResets  uint64
	Dropped        uint64 // all reasons
	DroppedBuffer  uint64
	DroppedPublish uint64
	MeanLagSeconds float64
	AppliedLocMsgs uint64
	ResetDropped   uint64
}

// Stats snapshots the node's counters.
func (n *Node) Stats() Stats {
	m := n.m
	s := Stats{
		Connected:      n.Connected(),
		Peers:          n.LivePeers(),
		SentLocations:  m.sent[kindLocations].Get(),
		SentLocBytes:   m.sentBytes[kindLocations].Get(),
		SentBlocks:     m.sentBlocks.Get(),
		DedupedBlocks:  m.deduped.Get(),
		AppliedBlocks:  m.applBlocks.Get(),
		AppliedResets:  m.applied[kindReset].Get(),
		AppliedLocMsgs: m.applied[kindLocations].Get(),
		DroppedBuffer:  m.dropped[dropBufferFull].Get(),
		DroppedPublish: m.dropped[dropPublish].Get(),
		ResetDropped:   m.resetBlocks.Get(),
	}
	for k := kindLocations; k <= kindReset; k++ {
		s.SentMessages += m.sent[k].Get()
		s.Received += m.received[k].Get()
		s.SentBytes += m.sentBytes[k].Get()
	}
	for _, c := range m.dropped {
		s.Dropped += c.Get()
	}
	n.lagMu.Lock()
	if n.lagN > 0 {
		s.MeanLagSeconds = n.lagSum / float64(n.lagN)
	}
	n.lagMu.Unlock()
	return s
}
