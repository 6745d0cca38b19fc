package edge

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/sched"
)

// TestSessionFollowInvariants: randomized sessions and siblings (requests
// that read their session's binding before a sibling moved it), on a
// fleet whose other replicas' load changes at random, under every
// policy. Invariants of the session rule: a new conversation (a first
// turn) placed because of its session never takes its backend past the
// load bound (a follow-up's session holds its conversation and yields
// only to overload: sched's TestRoutingInvariantsRandomized); after each
// pick the session is bound to where the request went, unless the
// request went where its own older binding said; every load is released
// to zero.
func TestSessionFollowInvariants(t *testing.T) {
	t.Parallel()
	for _, policy := range sched.Policies() {
		for seed := uint64(1); seed <= 2; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", policy, seed), func(t *testing.T) {
				t.Parallel()
				s := offlineCore(t, 4, func(c *Config) { c.Routing.Policy = policy })
				rng := rand.New(rand.NewPCG(seed, 7))
				bs := s.fleet().sched.Backends
				var open []*call
				for step := 0; step < 600; step++ {
					if rng.IntN(4) == 0 {
						bs[rng.IntN(len(bs))].SetRemoteLoad(uint32(rng.IntN(4)), 0)
					}
					if len(open) > 0 && rng.IntN(3) == 0 {
						i := rng.IntN(len(open))
						open[i].left()
						open = append(open[:i], open[i+1:]...)
						continue
					}
					c := testBegin(s, routeChat)
					body := conversation(rng.IntN(40), rng.IntN(3), false)
					if err := s.plan(c, canon.Chat, []byte(body)); err != nil {
						t.Fatal(err)
					}
					c.session = s.canon.HashSessionKey(fmt.Appendf(nil, "session-%d", rng.IntN(6)))
					if be, ok := s.sessions.Lookup(c.session, c.req.Now); ok {
						c.req.Bound = be + 1
						if rng.IntN(3) == 0 {
							c.req.Bound = rng.IntN(len(bs)) + 1 // a sibling read it before a move
						}
					}
					from := c.req.Bound - 1
					sc := s.fleet().sched
					elig := sc.Eligible(&c.req)
					cap := sc.LoadCap(&elig)
					u, r := s.pick(c, false)
					if r != nil {
						t.Fatalf("step %d: no pick: %+v", step, *r)
					}
					to := u.b.Index
					if c.dec.Rule == sched.RuleSession && !c.req.Followup {
						ra, _ := bs[to].RemoteLoad()
						// Its reservation included, within the bound as it stood before.
						if got := bs[to].Active() + int64(ra); got > cap {
							t.Fatalf("step %d: session placed on %d holding %d, bound %d", step, to, got, cap)
						}
					}
					if be, _ := s.sessions.Lookup(c.session, c.req.Now); be != to && to != from {
						t.Fatalf("step %d: went to %d, session bound to %d (read %d)", step, to, be, from)
					}
					open = append(open, c)
				}
				for _, c := range open {
					c.left()
				}
				for _, b := range bs {
					b.SetRemoteLoad(0, 0)
				}
				idle(t, s)
			})
		}
	}
}
