package cluster

import (
	"time"

	"github.com/nats-io/nats.go"
)

// receive applies another replica's message. NATS calls it on one
// goroutine per subscription, in order per sender.
func (n *Node) receive(msg *nats.Msg) {
	h, body, err := parseHeader(msg.Data)
	if err != nil {
		n.m.dropped[dropMalformed].Inc()
		return
	}
	if h.sender == n.id {
		return
	}
	if h.fingerprint != n.fp {
		n.m.dropped[dropMismatch].Inc()
		if !n.warned.Swap(true) {
			n.log.Error("cluster: ignoring a replica whose --hash-key, --block-size or --cbr-exclude differ from ours",
				"subject", msg.Subject)
		}
		return
	}
	if h.kind < kindLocations || h.kind > kindReset {
		n.m.dropped[dropMalformed].Inc()
		return
	}
	n.m.received[h.kind].Inc()
	switch h.kind {
	case kindLocations:
		err = decodeLocations(body, &n.scratch, n.applyLocations)
	case kindLoad:
		err = n.applyLoad(h.sender, body)
	case kindReset:
		err = n.applyReset(body)
	}
	if err != nil {
		n.m.dropped[dropMalformed].Inc()
		return
	}
	if h.kind != kindReset { // applyReset counts only resets that changed something
		n.m.applied[h.kind].Inc()
	}
}

func (n *Node) applyLocations(key uint64, at int64, hashes []uint64) {
	i, ok := n.v.Load().index[key]
	if !ok {
		n.m.dropped[dropUnknown].Inc()
		return
	}
	if at < n.floors[i].Load() {
		// Learned before the backend's latest reset: its cache is gone.
		n.m.dropped[dropStale].Inc()
		return
	}
	now := time.Now().UnixMilli()
	// A peer whose clock runs ahead must not make locations outlive
	// their TTL here.
	at = min(at, now)
	lag := float64(now-at) / 1e3
	n.m.lag.Update(lag)
	n.lagMu.Lock()
	n.lagSum += lag
	n.lagN++
	n.lagMu.Unlock()
	n.table.TouchAt(hashes, i, n.table.At(time.UnixMilli(at)))
	n.dd.heard(hashes, key, at)
	n.m.applBlocks.Add(len(hashes))
}

func (n *Node) applyLoad(sender uint64, body []byte) error {
	_, intervalMs, ents, err := decodeLoad(body, n.loadEnts)
	n.loadEnts = ents
	if err != nil {
		return err
	}
	// Bound what a peer may claim, so a bogus interval neither keeps a
	// dead peer's load forever nor ages out a live one at once.
	iv := time.Duration(min(max(intervalMs, 10), 10_000)) * time.Millisecond
	n.peers.update(sender, time.Now(), iv, ents, n.lookup)
	n.applyRemoteLoad()
	return nil
}

// applyReset drops the backend's locations older than the reset. A reset
// no newer than one already applied (every replica's health check reports
// the same recovery) changes nothing, and locations learned after a reset
// survive its late delivery.
func (n *Node) applyReset(body []byte) error {
	key, at, err := decodeReset(body)
	if err != nil {
		return err
	}
	i, ok := n.v.Load().index[key]
	if !ok {
		n.m.dropped[dropUnknown].Inc()
		return nil
	}
	at = min(at, time.Now().UnixMilli())
	if !raiseFloor(&n.floors[i], at) {
		n.m.dropped[dropStale].Inc()
		return nil
	}
	dropped := n.table.ResetBefore(i, n.table.At(time.UnixMilli(at)))
	n.m.resetBlocks.Add(dropped)
	n.m.applied[kindReset].Inc()
	return nil
}

func (n *Node) lookup(key uint64) (int, bool) {
	i, ok := n.v.Load().index[key]
	return i, ok
}
