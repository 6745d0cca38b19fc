package sched

import (
	"math"
	"math/bits"

	"github.com/kvca/kvca/chain"
)

// Resident work is, per backend, a count of the turns routed to it that
// decays with the resident window as time constant: a conversation whose
// turns come every g contributes about window/g while it lasts and fades
// once it ends. In-flight load alone sees a backend whose conversations
// are between turns as idle; this count does not.

// residentWindow is the decay time constant in ms: the operator's, or three
// gaps between a conversation's turns (a conversation quiet for that long
// has most likely ended), at most the TTL (after which its cache is
// forgotten anyway). Before any gap is seen it is a tenth of the TTL.
func (s *Scheduler) residentWindow() int64 {
	if s.ttft.window > 0 {
		return s.ttft.window
	}
	ttl := s.Table.TTL().Milliseconds()
	if s.ttft.gaps.Load() < 16 {
		return max(ttl/10, 1)
	}
	w := int64(3 * math.Float64frombits(s.ttft.gap.Load()))
	return min(max(w, 1), ttl)
}

// residentAt is the decayed count at now with time constant tau (ms).
func (m *predictor) residentAt(now int64, tau float64) float64 {
	v := m.resident.Load()
	return decayed(v, now, tau)
}

func decayed(v uint64, now int64, tau float64) float64 {
	x := float64(math.Float32frombits(uint32(v >> 32)))
	if x == 0 {
		return 0
	}
	dt := int32(uint32(now) - uint32(v))
	if dt <= 0 {
		return x
	}
	return x * math.Exp(-float64(dt)/tau)
}

// noteResident counts one turn routed to b.
func (s *Scheduler) noteResident(b *Backend, r *Request) {
	if len(r.Chain) == 0 {
		return
	}
	tau := float64(s.residentWindow())
	for {
		old := b.model.resident.Load()
		x := decayed(old, r.Now, tau) + 1
		nw := uint64(math.Float32bits(float32(x)))<<32 | uint64(uint32(r.Now))
		if b.model.resident.CompareAndSwap(old, nw) {
			return
		}
	}
}

// noteGap learns the time between a conversation's turns from the age of
// its known prefix on a holder.
func (s *Scheduler) noteGap(r *Request, holders *chain.Set, best int) {
	h := -1
	for wi, w := range holders {
		if w != 0 {
			h = wi<<6 | bits.TrailingZeros64(w)
			break
		}
	}
	if h < 0 {
		return
	}
	at, ok := s.Table.LastAccess(r.Chain[best-1], h, r.Now)
	gap := float64(r.Now - at)
	if !ok || gap < 0 || gap > float64(s.Table.TTL().Milliseconds()) {
		return
	}
	for {
		old := s.ttft.gap.Load()
		g := math.Float64frombits(old)
		if s.ttft.gaps.Load() == 0 {
			g = gap
		} else {
			g += (gap - g) / 32
		}
		if s.ttft.gap.CompareAndSwap(old, math.Float64bits(g)) {
			s.ttft.gaps.Add(1)
			return
		}
	}
}

// roomy reports whether b, with res resident turns and one conversation
// more, is expected to keep its batch at most half full: by Little's law
// the decayed count is the turn rate times the window, so the turns in
// flight are res × service / window, and the new conversation adds
// service / gap. Half full is read against the batch capacity. While
// none is known, the bound is one more than the most requests b was seen
// to run without a slot wait: that count is at most the capacity already
// (a slot wait would have taught the capacity), and read as it is, or
// halved, it shut the holders of a prompt out while their batches were
// far from full, their few answers so far having come one or two at a
// time. Far below its batch, concentrating conversations costs a
// backend nothing, and a new conversation is better kept with the holders
// of its prompt than sent to recompute it elsewhere.
func (s *Scheduler) roomy(b *Backend, res float64) bool {
	m := &b.model
	svc := float64(m.service.Load()) / 1e6
	if svc <= 0 || s.ttft.gaps.Load() < 16 {
		return false
	}
	c := float64(m.cap()) / 2 // room for the bursts of the turns' arrivals
	if c <= 0 {
		c = float64(m.served.Load() + 1)
	}
	g := math.Float64frombits(s.ttft.gap.Load())
	w := float64(s.residentWindow())
	if c <= 0 || g <= 0 || w <= 0 {
		return false
	}
	return res*svc/w+svc/g <= c
}

// residentSlack is how many turns above the mean resident work the
// holders of a new conversation's prompt may always go (kvca-cost): with
// a few conversations per backend, (1+ε)× the mean is below one
// conversation more than the mean, and would send every second
// conversation of a prompt away from its holder. Backends without the
// prompt get no slack: there the strict bound is what spreads the first
// sights of different prompts over different backends.
const residentSlack = 2

// residentBound returns the backends of elig a new conversation may go to:
// those it would leave at most (1+ε)× the mean resident work, or at most
// slack turns above it, and always the least resident one. res receives
// each backend's resident work.
func (s *Scheduler) residentBound(elig *chain.Set, now int64, res *[chain.MaxBackends]float32, slack float64) chain.Set {
	tau := float64(s.residentWindow())
	sum, n := 0.0, 0
	least := -1
	elig.Each(func(i int) {
		v := s.Backends[i].model.residentAt(now, tau)
		res[i] = float32(v)
		sum += float64(res[i])
		n++
		if least < 0 || res[i] < res[least] {
			least = i
		}
	})
	if s.ttft.eps < 0 || n == 0 {
		return *elig
	}
	// The least resident backends are always open: even work is never
	// out of bounds, however small ε.
	mean := (sum + 1) / float64(n)
	limit := max((1+s.ttft.eps)*mean, mean+slack, float64(res[least])+1)
	var open chain.Set
	elig.Each(func(i int) {
		if float64(res[i])+1 <= limit {
			open.Add(i)
		}
	})
	return open
}

// leastResidentTied moves the choice to the least resident of the
// backends in elig whose cost is bestCost, the first of them on a tie.
func (s *Scheduler) leastResidentTied(elig *chain.Set, now int64, bestCost uint64, cost func(int) (uint64, uint64), best *int, bestSt *uint64) bool {
	tau := float64(s.residentWindow())
	least, at := math.Inf(1), -1
	var atSt uint64
	elig.Each(func(i int) {
		c, st := cost(i)
		if c != bestCost {
			return
		}
		if v := s.Backends[i].model.residentAt(now, tau); v < least {
			least, at, atSt = v, i, st
		}
	})
	if at < 0 {
		return false
	}
	*best, *bestSt = at, atSt
	return true
}
