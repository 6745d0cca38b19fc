package admit

import (
	"strings"
	"testing"
	"time"
)

// Every rule has a name and decides one thing; the names are the metric's
// label values, so they stay unique and in the metric-label form.
func TestRuleNames(t *testing.T) {
	seen := map[string]bool{}
	for r := RuleNone + 1; r < numRules; r++ {
		n := r.String()
		if n == "" || seen[n] || strings.Trim(n, "abcdefghijklmnopqrstuvwxyz_") != "" {
			t.Errorf("rule %d: name %q", r, n)
		}
		seen[n] = true
		if r.Decision() == DecisionNone || r.Decision().String() == "" {
			t.Errorf("rule %s decides nothing", n)
		}
	}
	if RuleNone.String() != "" || numRules.String() != "" || RuleNone.Decision() != DecisionNone {
		t.Error("no rule has a name or a decision")
	}
	for r, want := range map[Rule]Decision{
		RuleRoom: DecisionGrant, RuleHighPreempts: DecisionGrant, RuleLimit: DecisionQueue,
		RuleTenantReserve: DecisionQueue, RuleQueueFull: DecisionShed, RuleFlood: DecisionDrop,
		RuleHolderLate: DecisionDrop, RuleFairQueue: DecisionGrant, RuleHolderWaitEnd: DecisionGrant,
		RuleLate: DecisionPass,
	} {
		if got := r.Decision(); got != want {
			t.Errorf("%s decides %s, want %s", r, got, want)
		}
	}
}

// The rule each decision names, through the admitter: at admission, in
// the queue, and counted in kvca_admission_decisions_total.
func TestDecisionsNameTheirRule(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 1, QueueSize: 2, QueueTimeout: 10 * time.Second})
	want := func(tk *Ticket, rule Rule) {
		t.Helper()
		if tk.Rule() != rule {
			t.Fatalf("rule %q, want %q", tk.Rule(), rule)
		}
	}
	h0, h1 := r.ticket(Normal, "a", 0), r.ticket(Normal, "a", 1)
	r.hold(t, h0, 0)
	want(h0, RuleRoom)
	r.hold(t, h1, 1)
	w1 := r.ticket(Low, "a", 0)
	if r.a.Admit(w1) != Queued {
		t.Fatal("not queued")
	}
	want(w1, RuleLimit)
	w2 := r.ticket(Low, "a", 1)
	r.a.Admit(w2)
	hi := r.ticket(High, "b", 0)
	if r.a.Admit(hi) != Queued {
		t.Fatal("high not queued")
	}
	want(hi, RuleLimit)
	// hi took the place of the youngest low waiter in the full queue.
	want(w2, RuleLowerClass)
	if w2.State() != Dropped || w2.Reason() != ReasonPreempted {
		t.Fatalf("state %d reason %v", w2.State(), w2.Reason())
	}
	r.a.Done(w2)
	shed := r.ticket(Low, "a", 0)
	if r.a.Admit(shed) != Shed {
		t.Fatal("not shed")
	}
	want(shed, RuleQueueFull)
	r.a.Done(shed)
	r.a.Done(h0) // the slot goes to the high waiter
	want(hi, RuleFairQueue)
	if hi.State() != Granted || r.a.Admit(hi) != Go || !r.a.Take(hi, 0) {
		t.Fatal("high not granted")
	}
	want(hi, RuleFairQueue) // Admit and Take after the grant keep its rule
	r.clk.advance(10 * time.Second)
	r.a.Sweep()
	want(w1, RuleQueueTimeout)
	r.a.Done(w1)
	r.a.Done(hi)
	want(hi, RuleFairQueue) // Done keeps it for the access log
	for name, n := range map[string]string{
		`kvca_admission_decisions_total{rule="room",decision="grant"}`:         "2",
		`kvca_admission_decisions_total{rule="limit",decision="queue"}`:        "3",
		`kvca_admission_decisions_total{rule="lower_class",decision="drop"}`:   "1",
		`kvca_admission_decisions_total{rule="queue_full",decision="shed"}`:    "1",
		`kvca_admission_decisions_total{rule="fair_queue",decision="grant"}`:   "1",
		`kvca_admission_decisions_total{rule="queue_timeout",decision="drop"}`: "1",
		`kvca_admission_decisions_total{rule="starvation",decision="grant"}`:   "0",
		`kvca_admission_admitted_total{class="high",how="queued"}`:             "1",
	} {
		if got := r.metric(name); got != n {
			t.Errorf("%s = %s, want %s", name, got, n)
		}
	}
}

// The rules that close the room name themselves in the queue decision.
func TestQueueDecisionNamesTheClosingRule(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want Rule
	}{
		{"high reserve", Config{MaxInflight: 2, HighReserve: 1}, RuleHighReserve},
		{"high pool", Config{MaxInflight: 2, HighPool: 1}, RuleHighPool},
	} {
		c.cfg.Backends, c.cfg.QueueSize = fleet(1), 4
		r := newRig(t, c.cfg)
		r.hold(t, r.ticket(Normal, "a", 0), 0)
		tk := r.ticket(Normal, "a", 0)
		if r.a.Admit(tk) != Queued || tk.Rule() != c.want {
			t.Errorf("%s: rule %q, want %q", c.name, tk.Rule(), c.want)
		}
		r.a.Done(tk)
	}
}

// A follow-up waits for its holder while another backend has room, and
// takes that backend when its holder wait ends.
func TestHolderWaitDecisions(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 1, QueueSize: 4, HolderWait: time.Second})
	r.hold(t, r.ticket(Normal, "a", 0), 0)
	tk := r.ticket(Normal, "a", 0, 1)
	tk.Preferred = setOf(0)
	if r.a.Admit(tk) != Queued || tk.Rule() != RuleHolderWait {
		t.Fatalf("rule %q, want holder_wait", tk.Rule())
	}
	r.clk.advance(time.Second)
	r.a.Sweep()
	if tk.State() != Granted || tk.Rule() != RuleHolderWaitEnd || tk.Backend() != 1 {
		t.Fatalf("state %d rule %q backend %d", tk.State(), tk.Rule(), tk.Backend())
	}
}

// Past the limit where the engine preempts for it, a high request's
// grant names high_preempts.
func TestHighPreemptsDecision(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(1), MaxInflight: 1, QueueSize: 4, HighPreempts: true})
	r.hold(t, r.ticket(Normal, "a", 0), 0)
	tk := r.ticket(High, "b", 0)
	r.hold(t, tk, 0)
	if tk.Rule() != RuleHighPreempts {
		t.Fatalf("rule %q", tk.Rule())
	}
	if got := r.metric(`kvca_admission_decisions_total{rule="high_preempts",decision="grant"}`); got != "1" {
		t.Fatalf("counted %s", got)
	}
}

func TestUnlimitedDecision(t *testing.T) {
	a, _ := New(Config{Backends: fleet(1)})
	tk := &Ticket{Eligible: setOf(0)}
	if a.Admit(tk) != Go || tk.Rule() != RuleUnlimited {
		t.Fatalf("rule %q", tk.Rule())
	}
}
