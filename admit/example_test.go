package admit_test

import (
	"fmt"

	"github.com/kvca/kvca/admit"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// request stands for the edge's per-request state, which embeds the
// ticket so admission allocates nothing.
type request struct {
	name string
	tk   admit.Ticket
}

// An event loop's use of the admitter: admit when planned, route among
// the room, take the chosen backend, release when done; a queued request
// continues when its wake, posted to the loop's inbox, is taken.
func Example() {
	a, _ := admit.New(admit.Config{Backends: []*sched.Backend{sched.NewBackend(0, "http://a", "a:80"), sched.NewBackend(1, "http://b", "b:80")}, MaxInflight: 1, QueueSize: 8})
	defer a.Close()
	var inbox []*admit.Ticket // the loop's inbox (a mutex and an eventfd in the edge)
	post := func(t *admit.Ticket, seq uint64) {
		if t.Seq() == seq {
			inbox = append(inbox, t)
		}
	}
	var all chain.Set
	all.Add(0)
	all.Add(1)
	// route stands for sched: the lowest backend of the room.
	route := func(room *chain.Set) int {
		for b := 0; b < 2; b++ {
			if room.Has(b) {
				return b
			}
		}
		return -1
	}
	start := func(r *request) {
		for {
			switch a.Admit(&r.tk) {
			case admit.Shed:
				fmt.Printf("%s: 429 %s, Retry-After %d\n", r.name, r.tk.Reason().Code(), r.tk.RetryAfter())
				a.Done(&r.tk)
				return
			case admit.Queued:
				fmt.Printf("%s: queued\n", r.name)
				return
			}
			b := route(r.tk.Room())
			if a.Take(&r.tk, b) {
				fmt.Printf("%s: sent to backend %d\n", r.name, b)
				return
			}
		}
	}
	reqs := []*request{{name: "a"}, {name: "b"}, {name: "c"}}
	for _, r := range reqs {
		r.tk = admit.Ticket{Eligible: all, Wake: post, Owner: r}
		start(r)
	}
	a.Done(&reqs[0].tk) // a's answer is over: its slot goes to c
	for _, t := range inbox {
		r := t.Owner.(*request)
		if t.State() == admit.Granted {
			start(r)
		}
	}
	a.Done(&reqs[1].tk)
	a.Done(&reqs[2].tk)
	fmt.Println("in flight:", a.Inflight(0), a.Inflight(1))
	// Output:
	// a: sent to backend 0
	// b: sent to backend 1
	// c: queued
	// c: sent to backend 0
	// in flight: 0 0
}
