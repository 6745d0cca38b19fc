package admit

// Rule names the rule of the admission policy that made a ticket's latest
// decision: why it went at once, waited, was shed, left the queue without
// a slot, or was granted one from the queue. The names are the values of
// the rule label of kvca_admission_decisions_total and of the access
// log's admission rule, so an operator can tell which rule is acting.
type Rule uint8

const (
	RuleNone Rule = iota
	// Grants at admission.
	RuleUnlimited      // no limit is set: every request goes
	RuleRoom           // an eligible backend had a free slot open to the class
	RuleSpared         // would wait for its holders, but its tenant is spared
	RuleHolderOverflow // its holders are full and so is the queue: any backend with room
	RuleHighPreempts   // class High past the limit where the engine preempts for it
	// Waits.
	RuleLimit         // every eligible backend is at its limit (or unhealthy)
	RuleHolderWait    // waits for the holders of its prefix
	RuleHighReserve   // the free slots are the high-priority reserve
	RuleMaxPrefill    // the free slots' backends have too much prefill pending
	RuleHighPool      // the fleet's free slots are the high-priority pool
	RuleTenantReserve // the fleet's last free slots are kept for spared tenants
	// Sheds and drops.
	RuleQueueFull    // the queue was full and the newcomer outranks no waiter
	RuleLowerClass   // a newcomer of a higher class took its place in a full queue
	RuleFlood        // a newcomer of a tenant with fewer waiters took its place
	RuleQueueTimeout // it waited the queue timeout
	RuleHolderLate   // its long holder wait ended while the queue sheds
	// Grants from the queue.
	RuleFairQueue     // its turn: strict priority, fair queuing across tenants
	RuleStarvation    // its class was passed over StarvationLimit times
	RuleHolderTurn    // a holder-bound waiter whose turn came on a non-holder
	RuleStaleTenant   // its tenant's oldest waiter was stale: the soonest first token instead
	RuleHolderWaitEnd // its holder wait ended and a backend had room
	// Passes: no ticket is decided, the slot stays free.
	RuleLate // every candidate would be late and only one tenant waits
	numRules
)

var ruleNames = [numRules]string{
	"", "unlimited", "room", "spared", "holder_overflow", "high_preempts",
	"limit", "holder_wait", "high_reserve", "max_prefill", "high_pool", "tenant_reserve",
	"queue_full", "lower_class", "flood", "queue_timeout", "holder_late",
	"fair_queue", "starvation", "holder_turn", "stale_tenant", "holder_wait_end",
	"late",
}

// String is the rule's name, as in the metrics; "" for none.
func (r Rule) String() string {
	if r < numRules {
		return ruleNames[r]
	}
	return ""
}

// Decision is what a rule decided: each rule decides one thing, so the
// decision is the rule's.
type Decision uint8

const (
	DecisionNone  Decision = iota
	DecisionGrant          // the request got a slot (at once or from the queue)
	DecisionQueue          // the request waits
	DecisionShed           // the request was refused on arrival (429)
	DecisionDrop           // the request left the queue without a slot (429)
	DecisionPass           // a free slot was left free for the next arrival
	numDecisions
)

var decisionNames = [numDecisions]string{"", "grant", "queue", "shed", "drop", "pass"}

func (d Decision) String() string {
	if d < numDecisions {
		return decisionNames[d]
	}
	return ""
}

// Decision is what the rule decides.
func (r Rule) Decision() Decision {
	switch {
	case r == RuleNone || r >= numRules:
		return DecisionNone
	case r <= RuleHighPreempts, r >= RuleFairQueue && r <= RuleHolderWaitEnd:
		return DecisionGrant
	case r <= RuleTenantReserve:
		return DecisionQueue
	case r == RuleQueueFull:
		return DecisionShed
	case r <= RuleHolderLate:
		return DecisionDrop
	}
	return DecisionPass
}

// decide records r as t's latest decision and counts it.
func (a *Admitter) decide(t *Ticket, r Rule) {
	t.rule = r
	a.m.decided(r)
}
