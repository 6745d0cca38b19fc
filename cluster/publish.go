package cluster

import (
	"time"

	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/internal/tick"
)

// flushLoop publishes resets and learned locations. The first learned
// chain after a quiet spell goes out at once (at low rates peers hear of
// it within a millisecond or so); while more keeps coming it is batched
// for FlushInterval, which bounds the location messages to
// 1/FlushInterval per second whatever the request rate.
func (n *Node) flushLoop() {
	p := publisher{n: n, batch: newLocBatch(chain.MaxBackends)}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-n.stop:
			p.flush()
			return
		case <-n.kick:
		case <-n.urgent:
		}
		for p.flush() {
			timer.Reset(n.o.FlushInterval)
			select {
			case <-n.stop:
				timer.Stop()
				p.flush()
				return
			case <-n.urgent:
				timer.Stop()
			case <-timer.C:
			}
		}
	}
}

// publisher is the flush loop's state; steady state allocates nothing.
type publisher struct {
	n        *Node
	spare    learnBatch
	batch    *locBatch
	filtered []uint64
	out      []byte
}

// flush publishes pending resets, then pending locations; it reports
// whether there were any locations.
func (p *publisher) flush() bool {
	n := p.n
	for {
		select {
		case r := <-n.resets:
			key, ok := n.v.Load().key(r.backend)
			if !ok {
				continue // a slot added since; its view comes with the reload
			}
			p.out = appendReset(p.out[:0], n.header(), key, r.at)
			p.publish(kindReset, n.subjRst)
			continue
		default:
		}
		break
	}
	b := n.buf.swap(p.spare)
	defer func() { p.spare = b }()
	if len(b.recs) == 0 {
		return false
	}
	refresh := n.o.Refresh.Milliseconds()
	maxBlocks := (n.o.MaxMessageBytes - headerSize) / 8
	off := 0
	v := n.v.Load()
	for _, r := range b.recs {
		hs := b.hashes[off : off+int(r.n)]
		off += int(r.n)
		at := n.table.TimeOf(r.at).UnixMilli()
		key, ok := v.key(int(r.backend))
		if !ok {
			continue
		}
		floor := n.floors[r.backend].Load()
		if at < floor {
			n.m.dropped[dropStale].Inc()
			continue
		}
		p.filtered = n.dd.filter(p.filtered[:0], hs, key, at, refresh, floor)
		n.m.deduped.Add(len(hs) - len(p.filtered))
		for f := p.filtered; len(f) > 0; {
			room := maxBlocks - p.batch.size()/8 - 4
			if room < 1 && !p.batch.empty() {
				p.sendBatch()
				continue
			}
			take := min(max(room, 1), len(f))
			p.batch.add(int(r.backend), key, at, f[:take])
			f = f[take:]
		}
	}
	p.sendBatch()
	return true
}

func (p *publisher) sendBatch() {
	if p.batch.empty() {
		return
	}
	p.out = p.batch.encode(p.out[:0], p.n.header())
	if p.publish(kindLocations, p.n.subjLoc) {
		p.n.m.sentBlocks.Add(p.batch.blocks)
	}
	p.batch.reset()
}

// publish sends p.out; nats.go copies it, so p.out is free on return.
func (p *publisher) publish(kind byte, subj string) bool {
	if err := p.n.nc.Publish(subj, p.out); err != nil {
		p.n.m.dropped[dropPublish].Inc()
		return false
	}
	p.n.m.sent[kind].Inc()
	p.n.m.sentBytes[kind].Add(len(p.out))
	return true
}

func (n *Node) header() header { return header{fingerprint: n.fp, sender: n.id} }

// loadLoop publishes this replica's in-flight counts every LoadInterval,
// and ages out silent peers. While disconnected it publishes nothing: the
// counts would be stale by the time they were delivered.
func (n *Node) loadLoop() {
	var ents []loadEntry
	var out []byte
	var slow int
	tick.Every(n.stop, n.o.LoadInterval, func() {
		ents = ents[:0]
		v := n.v.Load()
		for i, b := range v.backs {
			a, pf := b.Active(), b.Prefill()
			if a > 0 || pf > 0 {
				ents = append(ents, loadEntry{key: v.keys[i], active: sat32(uint64(max(a, 0))), prefill: sat32(uint64(max(pf, 0)))})
			}
		}
		if n.nc.IsConnected() {
			out = appendLoad(out[:0], n.header(), time.Now().UnixMilli(), n.o.LoadInterval.Milliseconds(), ents)
			if err := n.nc.Publish(n.subjLd, out); err != nil {
				n.m.dropped[dropPublish].Inc()
			} else {
				n.m.sent[kindLoad].Inc()
				n.m.sentBytes[kindLoad].Add(len(out))
			}
		}
		n.applyRemoteLoad()
		if d, err := n.sub.Dropped(); err == nil && d > slow {
			n.m.dropped[dropSlowConsumer].Add(d - slow)
			slow = d
		}
	})
}

// applyRemoteLoad sums the live peers' counts into each backend.
func (n *Node) applyRemoteLoad() {
	n.aggMu.Lock()
	defer n.aggMu.Unlock()
	n.livePeers.Store(int32(n.peers.sum(time.Now(), n.aggAct, n.aggPre)))
	for i, b := range n.v.Load().backs {
		b.SetRemoteLoad(n.aggAct[i], n.aggPre[i])
	}
}
