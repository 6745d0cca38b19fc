package admit

import (
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// Candidates is the eligible set for a ticket: the backends r allows (all
// when r.Allowed is nil) that it has not tried, health aside, so that a
// backend recovering while the request waits can still serve it.
func (a *Admitter) Candidates(r *sched.Request) chain.Set {
	var e chain.Set
	if r.Allowed != nil {
		e = *r.Allowed
	} else {
		for i := range int(a.used.Load()) {
			e.Add(i)
		}
	}
	for i := range e {
		e[i] &^= r.Exclude[i]
	}
	return e
}

// Estimate fills t's Preferred (the backends holding the longest known
// prefix of r's chain when r is a follow-up: those its routing would
// prefer) and its prefill estimate (Blocks, Held, Shared, Sharing) from
// the table, with one walk of r's chain.
func Estimate(table *chain.Table, r *sched.Request, t *Ticket) {
	t.Preferred, t.Sharing = chain.Set{}, chain.Set{}
	t.Blocks, t.Held, t.Shared = int32(len(r.Chain)), 0, 0
	if len(r.Chain) == 0 {
		return
	}
	var match [chain.MaxBackends]int32
	holders := table.Matches(r.Chain, r.Now, &match)
	best := int32(0)
	holders.Each(func(b int) { best = max(best, match[b]) })
	holders.Each(func(b int) {
		switch m := match[b]; {
		case m == best && r.Followup:
			t.Preferred.Add(b)
		case m > 0:
			t.Sharing.Add(b)
			t.Shared = max(t.Shared, m)
		}
	})
	if r.Followup {
		t.Held = best
	}
}

// ttftOn estimates t's time to its first token if granted b now: what it
// has waited plus b's prefill of the blocks b lacks (novelOn).
func (a *Admitter) ttftOn(t *Ticket, b int, now int64) int64 {
	w := now - t.enq
	if t.Blocks <= 0 {
		return w
	}
	if be := a.slots[b].b.Load(); be != nil {
		w += int64(be.PrefillTime(t.novelOn(b)))
	}
	return w
}

// novelOn is how many blocks of t's chain b lacks: the Preferred hold
// Held, the Sharing Shared, the others none.
func (t *Ticket) novelOn(b int) int {
	novel := t.Blocks
	switch {
	case t.Preferred.Has(b):
		novel -= t.Held
	case t.Sharing.Has(b):
		novel -= t.Shared
	}
	return int(max(novel, 0))
}
