package live

import (
	"time"

	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/kdn"
)

// holding is how much of a chain one backend holds, as the block table
// sees it. Only the leading run counts: routing walks a chain from its
// first block, so a block behind a gap is of no use to a request.
type holding struct {
	blocks   int   // leading blocks with a live location on the backend
	total    int   // blocks in the chain
	pinned   int   // of the leading blocks, how many are pinned
	newest   int64 // latest last access among them (table ms)
	expires  int64 // earliest expiry among the unpinned ones (table ms), -1 if none
	tableNow int64
}

func (h holding) complete() bool { return h.total > 0 && h.blocks == h.total }

// holdingOf reads the table for backend b's hold on c at table time now.
func holdingOf(t *chain.Table, c []uint64, b int, now int64) holding {
	h := holding{total: len(c), expires: -1, tableNow: now}
	ttl, pred := t.TTL().Milliseconds(), t.PredictTTL().Milliseconds()
	var buf [8]chain.Location
	for _, blk := range c {
		var loc *chain.Location
		locs := t.Locations(blk, now, buf[:0])
		for i := range locs {
			if locs[i].Backend == b {
				loc = &locs[i]
				break
			}
		}
		if loc == nil {
			break
		}
		h.blocks++
		h.newest = max(h.newest, loc.Last)
		if loc.Pinned {
			h.pinned++
		} else {
			// A prediction not yet confirmed lives min(predict TTL, TTL).
			exp := loc.Last + ttl
			if loc.Predicted {
				exp = loc.Last + pred
			}
			if h.expires < 0 || exp < h.expires {
				h.expires = exp
			}
		}
	}
	return h
}

// observe builds the observation of an artifact on one endpoint, as of
// generation gen (the caller checks it still holds), at ts:
// available when every block is held, partial when a leading part is,
// unavailable when none. It was seen at the latest access of its blocks
// and counts until the first of its unpinned blocks expires; pinned blocks
// do not expire, so an all-pinned hold is re-observed after one TTL; a
// predicted block (recorded at routing, not yet confirmed by an answer)
// expires min(predict TTL, TTL) after it was recorded.
func (g *Gateway) observe(p *prefixInfo, b int, gen int64, ts time.Time) (kdn.CacheReplicaObservation, holding) {
	t := g.srv.Table()
	h := holdingOf(t, p.chain, b, t.At(ts))
	ttl := t.TTL()
	seen, until := ts, ts.Add(ttl)
	state := kdn.ObsUnavailable
	if h.blocks > 0 {
		state = kdn.ObsPartial
		if h.complete() {
			state = kdn.ObsAvailable
		}
		if s := wire(t.TimeOf(h.newest)); s.Before(ts) {
			seen = s
		}
		if h.expires >= 0 {
			until = wire(t.TimeOf(h.expires))
		}
	}
	if !until.After(seen) {
		until = seen.Add(time.Microsecond)
	}
	o := kdn.CacheReplicaObservation{
		ArtifactID:             p.artifact.ID(),
		State:                  state,
		Source:                 kdn.SourceCoordinator,
		EndpointID:             g.endpointIDOf(b),
		EndpointGeneration:     gen,
		RuntimeProfile:         kdn.ProfileV1,
		GatewayProfile:         kdn.GatewayUnknownFuture,
		CompatibilityProfileID: g.compat,
		Tier:                   kdn.Some(tierName),
		SourceObservedAt:       kdn.Some(seen),
		ProjectedAt:            ts,
		ExpiresAt:              kdn.Some(until),
		// kvca learns a location from a 2xx answer; the backend may still
		// have evicted it since, which kvca cannot see.
		Confidence: kdn.ConfidenceMedium,
	}
	return o, h
}

func wire(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
