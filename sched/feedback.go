package sched

import (
	"math"
	"sync/atomic"
	"time"
)

// The closed loop: every answer whose engine says how many of the prompt's
// tokens it found in its prefix cache checks what kvca predicted cached
// there when it routed. Engines evict least recently used blocks first, so
// what an engine keeps is, roughly, what it used within some time: its
// retention, which shrinks as its cache fills with other work. An engine
// that reports fewer blocks than predicted has evicted the predicted
// prefix, last used a ago: it keeps less than a, and the locations of that
// backend older than its retention are taken as gone, now and from then
// on (Table.SetRetention). One that reports them held keeps at least a.
// One that reports more held blocks kvca had forgotten: its retention was
// too short; the answer has taught kvca the whole prompt is there now. An
// engine that reports nothing changes nothing.

// Check is one answer's comparison, in CBR blocks (turned from tokens by
// the caller with the learned bytes per token).
type Check struct {
	// PredictedBlocks were believed cached on the backend at routing;
	// ReportedBlocks is what the engine says it found.
	PredictedBlocks, ReportedBlocks int
	// PredictedTokens and ReportedTokens are the same in tokens, for the
	// counters; PromptTokens is the answer's prompt.
	PredictedTokens, ReportedTokens, PromptTokens int64
	// Tolerance is the rounding allowed each way, in blocks: an engine
	// caches whole blocks of its own, and the bytes per token is a mean.
	Tolerance int
	// LastAccess is when kvca last saw the backend use the predicted
	// prefix's deepest block (table ms), read at routing; -1: unknown.
	// Now is the answer's table time.
	LastAccess, Now int64
}

// Verdicts of a Check.
const (
	VerdictAgree = iota // within the tolerance
	VerdictUnder        // the engine had fewer: it evicted what kvca believed held
	VerdictOver         // the engine had more than kvca knew
)

// feedback is a backend's record of checks (Backend.fb).
type feedback struct {
	predicted, reported, prompt atomic.Uint64 // tokens, over reporting answers
	absErr                      atomic.Uint64 // Σ |predicted − reported| tokens
	checks                      atomic.Uint64
	verdicts                    [3]atomic.Uint64
	lastReport                  atomic.Int64  // unix ms
	drift                       atomic.Uint64 // float64 bits: decayed share of mispredictions
}

// driftWeight is the weight of the newest check in the decayed share of
// mispredictions: about the last 32 answers count.
const driftWeight = 1.0 / 32

// Trust states of a backend's predictions (FeedbackState.Trust).
const (
	TrustChecked    = "checked"    // answers report cached tokens and agree
	TrustDrifting   = "drifting"   // over a quarter of recent answers disagree
	TrustUnreported = "unreported" // no answer reported cached tokens lately
)

// driftLimit is the share of recent mispredictions past which a backend's
// predictions are drifting.
const driftLimit = 0.25

// unreportedAfter: no report for this long makes a backend unreported.
const unreportedAfter = 5 * time.Minute

// CheckCached compares what an answer of b reported with what was
// predicted and acts on it (retain): b's retention falls when the engine
// evicted what was predicted, and rises when it held it or more. It
// returns the verdict. It allocates nothing.
func (s *Scheduler) CheckCached(b *Backend, c Check, now time.Time) int {
	f := &b.fb
	f.predicted.Add(uint64(max(c.PredictedTokens, 0)))
	f.reported.Add(uint64(max(c.ReportedTokens, 0)))
	f.prompt.Add(uint64(max(c.PromptTokens, 0)))
	f.absErr.Add(uint64(abs64(c.PredictedTokens - c.ReportedTokens)))
	f.checks.Add(1)
	f.lastReport.Store(now.UnixMilli())
	v := VerdictAgree
	switch {
	case c.ReportedBlocks+c.Tolerance < c.PredictedBlocks:
		v = VerdictUnder
	case c.ReportedBlocks > c.PredictedBlocks+c.Tolerance:
		v = VerdictOver
	}
	switch age := c.Now - c.LastAccess; {
	case c.LastAccess >= 0 && age >= 0 && c.PredictedBlocks > 0:
		s.retain(b.Index, v, age)
	case v == VerdictOver:
		s.retain(b.Index, v, 0)
	}
	f.verdicts[v].Add(1)
	miss := 0.0
	if v != VerdictAgree {
		miss = 1
	}
	for {
		old := f.drift.Load()
		nw := math.Float64bits(math.Float64frombits(old)*(1-driftWeight) + miss*driftWeight)
		if f.drift.CompareAndSwap(old, nw) {
			return v
		}
	}
}

// retain adjusts backend b's retention by one check of a prefix last used
// age ms before. Evicted: the engine keeps less than age, and the
// retention falls towards it, at most halving per check, so that one
// check that misread the engine cannot make the table forget a whole
// backend. Held: it keeps at least age, and a lower retention rises to
// it. More held than predicted (the engine kept what the retention had
// already dropped): the retention doubles, and past the TTL it is lifted.
func (s *Scheduler) retain(b, v int, age int64) {
	stored := s.Table.Retention(b).Milliseconds()
	ttl := s.Table.TTL().Milliseconds()
	cur := stored
	if cur == 0 {
		cur = ttl
	}
	next := cur
	switch {
	case v == VerdictUnder && age < cur:
		next = max(age, cur/2, 1)
	case v == VerdictOver:
		next = max(2*cur, age+1)
	case v == VerdictAgree && age >= cur:
		next = age + 1
	}
	if next >= ttl {
		next = 0 // no bound but the TTL
	}
	if next != stored {
		s.Table.SetRetention(b, time.Duration(next)*time.Millisecond)
	}
}

// LastAccess is when d's backend last used the blocks d predicted cached
// there, for Check.LastAccess: as the policy read it while choosing, else
// read now; -1 when unknown. Call it before the answer touches the chain.
func (s *Scheduler) LastAccess(r *Request, d *Decision) int64 {
	if d.cachedAt > 0 {
		return d.cachedAt - 1
	}
	if d.Backend == nil {
		return -1
	}
	return s.lastAccessOf(r.Chain, d.Cached, d.Backend.Index, r.Now)
}

// lastAccessOf is when b last used the first n blocks of ch as the table
// knows it (the deepest block's last access); -1 when unknown.
func (s *Scheduler) lastAccessOf(ch []uint64, n int, b int, now int64) int64 {
	if n <= 0 || n > len(ch) {
		return -1
	}
	if at, ok := s.Table.LastAccess(ch[n-1], b, now); ok {
		return at
	}
	return -1
}

// FeedbackState is a backend's record of checks, for /admin/state.
type FeedbackState struct {
	Trust string `json:"trust"`
	// Checks counts the answers that reported cached tokens; Under and
	// Over those that reported fewer or more than predicted.
	Checks uint64 `json:"checks"`
	Under  uint64 `json:"under"`
	Over   uint64 `json:"over"`
	// PredictedTokens and EngineCachedTokens sum the prediction and the
	// report over those answers, PromptTokens their prompts.
	PredictedTokens    uint64 `json:"predicted_cached_tokens"`
	EngineCachedTokens uint64 `json:"engine_cached_tokens"`
	PromptTokens       uint64 `json:"prompt_tokens"`
	// ErrorTokens sums |predicted − reported|.
	ErrorTokens uint64 `json:"error_tokens"`
	// Drift is the decayed share of recent answers that disagreed.
	Drift float64 `json:"drift"`
	// RetentionMs is how long the engine was seen to keep a block after
	// its last use, which bounds its locations' life below the TTL; 0:
	// no eviction seen.
	RetentionMs int64 `json:"retention_ms"`
}

// Feedback returns b's record of checks as of now.
func (s *Scheduler) Feedback(b *Backend, now time.Time) FeedbackState {
	f := &b.fb
	st := FeedbackState{Checks: f.checks.Load(), Under: f.verdicts[VerdictUnder].Load(), Over: f.verdicts[VerdictOver].Load(),
		PredictedTokens: f.predicted.Load(), EngineCachedTokens: f.reported.Load(), PromptTokens: f.prompt.Load(),
		ErrorTokens: f.absErr.Load(), Drift: math.Float64frombits(f.drift.Load()),
		RetentionMs: s.Table.Retention(b.Index).Milliseconds()}
	last := f.lastReport.Load()
	switch {
	case st.Checks == 0 || now.Sub(time.UnixMilli(last)) > unreportedAfter:
		st.Trust = TrustUnreported
	case st.Drift > driftLimit:
		st.Trust = TrustDrifting
	default:
		st.Trust = TrustChecked
	}
	return st
}

// Tolerance is the rounding a check allows, in blocks, for a prediction
// of predicted blocks: one block of kvca's own, the engine's block of
// engineBlockTokens tokens at bytesPerToken, and an eighth of the
// prediction for the spread of the bytes per token about its mean.
func Tolerance(predicted int, bytesPerToken float64, blockSize, engineBlockTokens int) int {
	if blockSize <= 0 {
		return predicted
	}
	eng := int(math.Ceil(float64(engineBlockTokens) * bytesPerToken / float64(blockSize)))
	return 1 + eng + predicted/8
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
