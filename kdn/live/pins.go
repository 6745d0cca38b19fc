package live

import (
	"github.com/kvca/kvca/kdn"
	"github.com/kvca/kvca/kdn/gateway"
)

// Refusals of a pin; no task is created, so the client may retry the same
// idempotency key once the cause is gone.
const (
	msgPinNothing = "artifact is not cached on the endpoint; prefetch it first"
	msgPinLimit   = "pin would exceed the pinned block limit"
)

// pinKey is one artifact's pin on one backend.
type pinKey struct {
	artifact string
	backend  int
}

// pinRec remembers a pin for the bound: how many blocks, under which
// generation (a reset drops the table's pins with the locations, so a pin
// of an older generation no longer counts).
type pinRec struct {
	gen    int64
	blocks int
}

// pin pins the leading blocks backend b holds: pinning a block kvca has
// not seen there would claim a cache that may not exist.
func (g *Gateway) pin(p *prefixInfo, b int, gen int64) (gateway.Refusal, bool) {
	t := g.srv.Table()
	now := t.Now()
	h := holdingOf(t, p.chain, b, now)
	if h.blocks == 0 {
		return gateway.Refusal{Outcome: kdn.OutcomeFailed, Message: msgPinNothing}, true
	}
	k := pinKey{p.artifact.ID(), b}
	g.pinMu.Lock()
	defer g.pinMu.Unlock()
	if g.pinnedLocked(k)+h.blocks > g.maxPins {
		return gateway.Refusal{Outcome: kdn.OutcomeFailed, Message: msgPinLimit}, true
	}
	t.Pin(p.chain[:h.blocks], b, now)
	g.pins[k] = pinRec{gen: gen, blocks: h.blocks}
	return gateway.Refusal{}, false
}

func (g *Gateway) unpin(p *prefixInfo, b int) {
	g.srv.Table().Unpin(p.chain, b)
	g.dropPin(p.artifact.ID(), b)
}

func (g *Gateway) dropPin(artifact string, b int) {
	g.pinMu.Lock()
	delete(g.pins, pinKey{artifact, b})
	g.pinMu.Unlock()
}

// pinnedLocked counts the pinned blocks that still hold, leaving out
// except (re-pinning an artifact replaces its record), and forgets pins a
// reset has dropped.
func (g *Gateway) pinnedLocked(except pinKey) int {
	n := 0
	for k, r := range g.pins {
		switch {
		case r.gen != g.generation(k.backend):
			delete(g.pins, k)
		case k != except:
			n += r.blocks
		}
	}
	return n
}

// pinnedBlocks is the number of pinned blocks counted against the bound.
func (g *Gateway) pinnedBlocks() int {
	g.pinMu.Lock()
	defer g.pinMu.Unlock()
	return g.pinnedLocked(pinKey{backend: -1})
}
