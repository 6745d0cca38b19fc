// Package sched picks the backend for a request and reserves its load on it
// in one indivisible step. Load lives in one atomic word per backend, so
// selection needs no mutex anywhere.
package sched

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/kvca/kvca/chain"
)

// Backend is one upstream inference server as the scheduler sees it.
type Backend struct {
	Index int
	URL   string // as configured, e.g. http://10.0.0.5:8000
	Name  string // host:port, the metrics label

	// state packs active requests (high 32 bits) and reserved prefill
	// blocks (low 32 bits) so one compare-and-swap reserves both.
	state atomic.Uint64
	// remote is the other replicas' load on b, packed like state and set
	// by clustering; it weighs in selection but is never reserved here.
	remote  atomic.Uint64
	healthy atomic.Bool
	// retired: removed from the configuration; never eligible again.
	retired atomic.Bool
	// engine is what the engine's own metrics last reported (engine.go).
	engine atomic.Pointer[EngineSignals]
	// routed* count what the scheduler sent here (engine.go: Routed).
	routedReqs, routedBlocks, routedCached atomic.Uint64
	// seed decorrelates backends in rendezvous hashing.
	seed uint64
	// model is b's learned first-token latency and resident work (ttft.go).
	model predictor
	// fb is b's record of answers checked against predictions (feedback.go).
	fb feedback
}

const activeUnit = 1 << 32

// NewBackend returns a healthy backend with no load.
func NewBackend(index int, url, name string) *Backend {
	b := &Backend{Index: index, URL: url, Name: name, seed: mix64(uint64(index)*0x9e3779b97f4a7c15 + 1)}
	b.healthy.Store(true)
	return b
}

// Active returns the requests in flight on b.
func (b *Backend) Active() int64 { return int64(b.state.Load() >> 32) }

// Prefill returns the novel blocks reserved on b and not yet answered.
func (b *Backend) Prefill() int64 { return int64(uint32(b.state.Load())) }

// SetRemoteLoad records the other replicas' latest in-flight counts on b.
func (b *Backend) SetRemoteLoad(active, prefill uint32) {
	b.remote.Store(uint64(active)<<32 | uint64(prefill))
}

// RemoteLoad returns what SetRemoteLoad stored.
func (b *Backend) RemoteLoad() (active, prefill uint32) {
	r := b.remote.Load()
	return uint32(r >> 32), uint32(r)
}

// PendingPrefillTime is how long b's engine takes, at b's learned rate, to
// prefill what kvca's requests there (this replica's and the others') have
// reserved and not yet seen answered: the prefill a new request finds
// ahead of it.
func (b *Backend) PendingPrefillTime() time.Duration {
	_, rp := b.RemoteLoad()
	_, block := b.model.rates()
	return time.Duration(block * (b.Prefill() + int64(rp)))
}

// PrefillTime is b's time to first token for a request that must prefill
// novel blocks with nothing else ahead of it, as learned from its answers
// (or set by the ttft flags).
func (b *Backend) PrefillTime(novel int) time.Duration {
	base, block := b.model.rates()
	return time.Duration(base + block*int64(novel))
}

// Healthy reports whether b may receive new requests.
func (b *Backend) Healthy() bool { return b.healthy.Load() }

// SetHealthy changes b's eligibility and reports whether it changed; a
// retired backend stays out.
func (b *Backend) SetHealthy(v bool) bool {
	if v && b.retired.Load() {
		return false
	}
	return b.healthy.Swap(v) != v
}

// Retire takes b out for good: its backend was removed from the
// configuration. Requests already on it finish; none is routed to it.
func (b *Backend) Retire() {
	b.retired.Store(true)
	b.healthy.Store(false)
}

// Retired reports whether Retire was called.
func (b *Backend) Retired() bool { return b.retired.Load() }

func loadOf(st, weight uint64) uint64 { return (st>>32)*weight + uint64(uint32(st)) }

// Phase says how a request was routed: which dispatch phase chose its
// backend (docs/routing.md).
type Phase uint8

const (
	PhaseBootstrap Phase = iota // Dispatch Phase 1
	PhaseFollowup               // Dispatch Phase 2, a known prefix was found
	PhaseFallback               // a follow-up with no known prefix (Fallback Routing)
)

func (p Phase) String() string {
	switch p {
	case PhaseFollowup:
		return "followup"
	case PhaseFallback:
		return "fallback"
	}
	return "bootstrap"
}

// Request is what a policy may use to decide.
type Request struct {
	Chain    []uint64
	Followup bool
	Session  uint64
	Now      int64 // table time
	// T is the request's instant, when the caller has it (an event
	// loop's clock): routing and its reservation read no clock of their
	// own then. Zero: they read it.
	T time.Time
	// Allowed limits the choice (backends serving the request's model);
	// nil allows all.
	Allowed *chain.Set
	// Exclude holds backends already tried for this request.
	Exclude chain.Set
	// Bound is 1 + the index of the backend the request's conversation is
	// bound to (a named session, a Responses API thread), 0 if none. The
	// cost and kvca-cost policies send a bootstrap there, and the kvca,
	// cost and kvca-cost policies a follow-up of which no eligible backend
	// holds any block, while it is within the load bound; otherwise the
	// prefix and load decide and Bound is preferred among equally good
	// choices (bound.go).
	Bound int
	// Pin makes Bound binding for every policy while that backend is
	// eligible: a Responses API continuation (previous_response_id) can only
	// be answered by the backend that stores its thread.
	Pin bool
}

// Decision is a policy's answer.
type Decision struct {
	Backend *Backend
	Phase   Phase
	Cached  int // leading blocks the backend is believed to hold
	Novel   int // blocks it must compute, reserved as prefill load
	// Predicted is the time to first token the ttft policy expected on
	// Backend; 0 when the policy does not predict.
	Predicted time.Duration
	// Rule is what chose Backend; Overflowed, the first affinity whose
	// backends the load bound refused on the way (RuleNone: none).
	Rule, Overflowed Rule
	// cachedAt is, plus one, when Backend last used the deepest of the
	// Cached blocks (table ms), if the policy read it (holderPick); 0:
	// not read (LastAccess reads it then).
	cachedAt int64
	// before is Backend's load word just before this request was reserved.
	before uint64
	// Bound: the choice was Request.Bound's backend because of the binding
	// (pinned, or nothing else known), not because it won on prefix or load.
	Bound bool
	// yielded holds the affinities' backends that gave the request up to
	// overload (yields): the load placement that follows leaves them out
	// while another backend is eligible, or a saturated holder would keep
	// a request another backend answers sooner.
	yielded chain.Set
	// prefer is Request.Bound for reserveMin's ties.
	prefer int
	// spread: reserveMin breaks ties by the least resident work, so the
	// first sights of different prompts go to different backends rather
	// than in turns to one that already holds conversations.
	spread   bool
	tableNow int64 // Request.Now, for spread
	// unix is the request's wall clock for engine signals (engineNow).
	unix int64
}

// Policy selects a backend and reserves the request's load on it.
type Policy interface {
	Name() string
	// Pick fills d and reserves on d.Backend; false means no eligible
	// backend (all unhealthy, excluded or not serving the model).
	Pick(s *Scheduler, r *Request, d *Decision) bool
}

// Scheduler holds the backends, the block table and the policy.
type Scheduler struct {
	Backends     []*Backend
	Table        *chain.Table
	ActiveWeight uint64
	Policy       Policy
	// KVFull and LongPrefixBlocks tune the near-full rule (engine.go).
	KVFull           float32
	LongPrefixBlocks int
	engineMaxAge     int64 // ms; 0: engine signals off
	// ExtraLoad, when set before routing starts (the bench's oracle),
	// adds to each backend's load in blocks.
	ExtraLoad func(b *Backend) uint64
	rr        atomic.Uint64 // round-robin's turn
	// ties[k] is least-loaded's turn among k equal backends: one counter
	// per tie size, so requests tying among other sets (a conversation's
	// replicas) do not shift the turns of an idle fleet's first turns.
	ties [16]atomic.Uint64
	// ttft is the predicted-latency policy's settings and shared state.
	// ttft is shared with the schedulers Rebuild makes from this one.
	ttft *ttftState
	// bound is the load bound over affinities (bound.go), shared likewise.
	bound *boundState
}

// New builds a scheduler; policy is one of Policies().
func New(backends []*Backend, table *chain.Table, activeWeight int, policy string) (*Scheduler, error) {
	if len(backends) == 0 {
		return nil, fmt.Errorf("no backends")
	}
	if len(backends) > chain.MaxBackends {
		return nil, fmt.Errorf("at most %d backends are supported, got %d", chain.MaxBackends, len(backends))
	}
	if activeWeight < 0 {
		return nil, fmt.Errorf("active weight must not be negative")
	}
	p, err := PolicyByName(policy)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{Backends: backends, Table: table, ActiveWeight: uint64(activeWeight), Policy: p,
		KVFull: DefaultKVFull, LongPrefixBlocks: DefaultLongPrefixBlocks, ttft: &ttftState{}, bound: &boundState{}}
	s.SetAffinityEpsilon(DefaultAffinityEpsilon)
	s.initTTFT()
	return s, nil
}

// Rebuild returns a scheduler over backends that keeps what s learned:
// the table, the predicted-latency state and settings, and every Backend
// object it is given again (its load, health and learned rates). A
// backend's Index is its slot in the table, so a backend kept must stay at
// its index, and a removed one's slot holds it Retired (or a new backend
// that reuses the slot after its locations were reset). policy "" keeps
// s's policy; activeWeight < 0 keeps s's weight. s stays usable for what
// is already routed on it.
func (s *Scheduler) Rebuild(backends []*Backend, policy string, activeWeight int) (*Scheduler, error) {
	if len(backends) == 0 || len(backends) > chain.MaxBackends {
		return nil, fmt.Errorf("backends must be between 1 and %d, got %d", chain.MaxBackends, len(backends))
	}
	for i, b := range backends {
		if b.Index != i {
			return nil, fmt.Errorf("backend %s has index %d in slot %d", b.Name, b.Index, i)
		}
	}
	n := &Scheduler{Backends: backends, Table: s.Table, ActiveWeight: s.ActiveWeight, Policy: s.Policy,
		KVFull: s.KVFull, LongPrefixBlocks: s.LongPrefixBlocks, engineMaxAge: s.engineMaxAge,
		ExtraLoad: s.ExtraLoad, ttft: s.ttft, bound: s.bound}
	if policy != "" {
		p, err := PolicyByName(policy)
		if err != nil {
			return nil, err
		}
		n.Policy = p
	}
	if activeWeight >= 0 {
		n.ActiveWeight = uint64(activeWeight)
	}
	for _, b := range backends {
		// New: never given a model. Not a learned base of 0, which a
		// live backend can have: re-initialising it would wipe what it
		// learned while routes read it.
		if b.model.fleet == nil {
			n.initModel(b)
		}
	}
	return n, nil
}

// Route picks and reserves a backend for r. On success res must be
// released by the caller (ReleasePrefill at headers, ReleaseActive at end).
func (s *Scheduler) Route(r *Request, d *Decision, res *Reservation) bool {
	*d = Decision{}
	if !r.T.IsZero() && s.engineMaxAge > 0 {
		d.unix = r.T.UnixMilli()
	}
	// A pinned request goes to its bound backend whatever the policy.
	if !(r.Pin && s.pickBound(r, d)) && !s.Policy.Pick(s, r, d) {
		return false
	}
	res.arm(d.Backend, uint64(d.Novel), d.before, d.Predicted, r.T)
	s.noteResident(d.Backend, r)
	d.Backend.countRouted(len(r.Chain), d.Cached)
	return true
}

// Eligible returns the healthy, allowed, not excluded backends.
func (s *Scheduler) Eligible(r *Request) chain.Set {
	var e chain.Set
	for _, b := range s.Backends {
		if b.Healthy() && !r.Exclude.Has(b.Index) && (r.Allowed == nil || r.Allowed.Has(b.Index)) {
			e.Add(b.Index)
		}
	}
	return e
}

// reserveMin is least-loaded selection: among elig it picks the backend
// with the smallest load (plus, when addNovel, the blocks it would have to
// compute) and reserves one active unit and its novel blocks with a
// compare-and-swap on the state it compared; if another request moved that
// backend first, it chooses again. Ties are broken by counters that
// advance only on a tie, so equal backends take turns (an idle fleet sees
// its first turns spread evenly) and no index is favoured.
func (s *Scheduler) reserveMin(elig *chain.Set, n int, match *[chain.MaxBackends]int32, addNovel bool, d *Decision) bool {
	w := s.ActiveWeight
	now := s.engineNow(d)
	cost := func(i int) (uint64, uint64) {
		b := s.Backends[i]
		st := b.state.Load()
		c := loadOf(st, w) + loadOf(b.remote.Load(), w) + s.engineLoad(b, now)
		if s.ExtraLoad != nil {
			c += s.ExtraLoad(b)
		}
		if addNovel {
			c += uint64(n - int(match[i]))
		}
		return c, st
	}
	for attempt := 0; ; attempt++ {
		best, ties := -1, 0
		var bestCost, bestSt uint64
		for wi, word := range elig {
			for word != 0 {
				i := wi<<6 | trailingZeros(word)
				word &= word - 1
				c, st := cost(i)
				switch {
				case best < 0 || c < bestCost:
					best, bestCost, bestSt, ties = i, c, st, 1
				case c == bestCost:
					ties++
				}
			}
		}
		if best < 0 {
			return false
		}
		if ties > 1 && s.preferTied(elig, d.prefer, bestCost, cost, &best, &bestSt) {
			// The conversation's bound backend is among the tied.
		} else if ties > 1 && d.spread && s.leastResidentTied(elig, d.tableNow, bestCost, cost, &best, &bestSt) {
			// A new conversation goes to the least resident of the tied.
		} else if ties > 1 {
			// Take the k-th of the tied backends in index order. Loads may
			// move meanwhile; the compare-and-swap below catches that.
			k := int(s.ties[ties&15].Add(1) % uint64(ties))
		pick:
			for wi, word := range elig {
				for word != 0 {
					i := wi<<6 | trailingZeros(word)
					word &= word - 1
					if c, st := cost(i); c == bestCost {
						if k == 0 {
							best, bestSt = i, st
							break pick
						}
						k--
					}
				}
			}
		}
		b := s.Backends[best]
		novel := n
		if match != nil {
			novel = n - int(match[best])
		}
		if b.state.CompareAndSwap(bestSt, bestSt+activeUnit+uint64(novel)) || attempt >= 8 {
			d.before = bestSt
			if attempt >= 8 {
				// Under extreme contention settle for the last choice.
				d.before = b.state.Add(activeUnit+uint64(novel)) - activeUnit - uint64(novel)
			}
			d.Backend = b
			d.Novel = novel
			d.Cached = n - novel
			return true
		}
	}
}

// reserveOn reserves on a backend chosen without regard to load (baselines).
func reserveOn(b *Backend, novel int, d *Decision) {
	d.before = b.state.Add(activeUnit+uint64(novel)) - activeUnit - uint64(novel)
	d.Backend = b
	d.Novel = novel
}

// Reservation tracks one request's load so each part is released exactly
// once, whichever of completion, error or disconnect comes first.
type Reservation struct {
	b     *Backend
	novel uint64
	// bit 0: prefill released, bit 1: active released, bit 2: first byte
	// observed (FirstByte).
	done atomic.Uint32
	// at is the dispatch instant (monoNow), before is b's load word just
	// before the reservation and pred the predicted TTFT (ns, 0: none):
	// what FirstByte learns from.
	at     int64
	before uint64
	pred   int64
}

func (r *Reservation) arm(b *Backend, novel, before uint64, pred time.Duration, t time.Time) {
	r.b = b
	r.novel = novel
	r.at = b.model.at(t)
	r.before = before
	r.pred = int64(pred)
	r.done.Store(0)
}

// Backend returns the reserved backend.
func (r *Reservation) Backend() *Backend { return r.b }

// ReleasePrefill releases the novel-block load (the backend answered); it
// reports whether this call released it (false: released before, or
// nothing reserved).
func (r *Reservation) ReleasePrefill() bool {
	if r.b != nil && r.done.Or(1)&1 == 0 {
		r.b.state.Add(-r.novel)
		return true
	}
	return false
}

// ReleaseActive releases the active-request unit, and the prefill load if
// headers never came.
func (r *Reservation) ReleaseActive() { r.ReleaseActiveAt(time.Time{}) }

// ReleaseActiveAt is ReleaseActive at instant t (zero: now), which the
// backend's service time is learned from.
func (r *Reservation) ReleaseActiveAt(t time.Time) {
	r.ReleasePrefill()
	if r.b != nil {
		if old := r.done.Or(2); old&2 == 0 {
			r.b.state.Add(^uint64(activeUnit - 1))
			if old&4 != 0 {
				r.b.model.observeService(r.b.model.at(t) - r.at)
			}
		}
	}
}

// Released reports whether both parts have been released.
func (r *Reservation) Released() bool { return r.b == nil || r.done.Load() == 3 }

// ReserveOn reserves a request's load on a backend chosen by the caller
// (a prefetch aimed at one endpoint); false if it is not healthy.
func (s *Scheduler) ReserveOn(b *Backend, novel int, res *Reservation) bool {
	if !b.Healthy() {
		return false
	}
	before := b.state.Add(activeUnit+uint64(novel)) - activeUnit - uint64(novel)
	res.arm(b, uint64(novel), before, 0, time.Time{})
	return true
}
