package affinity_test

import (
	"testing"
	"time"

	"github.com/kvca/kvca/affinity"
	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// TestRequestPathFlow is the sequence the proxy runs per request, end to
// end over the real packages: canonicalise, name the session, look its
// binding up, route, bind; and for the Responses API, learn the answer's
// id and pin its continuation to the producer.
func TestRequestPathFlow(t *testing.T) {
	key := chain.Key{K0: 1, K1: 2}
	c := canon.NewWithOptions(nil, canon.Options{HashKey: [2]uint64{key.K0, key.K1}})
	table := chain.NewTable(chain.Config{TTL: time.Minute, MaxBlocks: 1 << 12})
	var backs []*sched.Backend
	for i := 0; i < 4; i++ {
		backs = append(backs, sched.NewBackend(i, "http://b", "b"))
	}
	s, err := sched.New(backs, table, 4, "kvca-cost")
	if err != nil {
		t.Fatal(err)
	}
	sessions := affinity.New(affinity.Sessions, affinity.Config{TTL: time.Hour})
	threads := affinity.New(affinity.Responses, affinity.Config{TTL: time.Hour})
	h := chain.NewHasher(key, 64)
	var info canon.Info

	route := func(api canon.API, body string, header map[string]string) sched.Decision {
		t.Helper()
		h.Reset()
		if err := c.Canonicalize(api, []byte(body), h, &info); err != nil {
			t.Fatal(err)
		}
		now := time.Now().UnixMilli()
		r := sched.Request{Chain: h.Sum(), Followup: info.Followup, Now: table.Now()}
		sk := c.SessionKey(&info, func(name string) []byte { return []byte(header[name]) })
		if len(info.PreviousResponseID) > 0 {
			if b, ok := threads.Lookup(c.HashSessionKey(info.PreviousResponseID), now); ok {
				r.Bound, r.Pin = b+1, true
			}
		} else if b, ok := sessions.Lookup(sk, now); ok {
			r.Bound = b + 1
		}
		var d sched.Decision
		var res sched.Reservation
		if !s.Route(&r, &d, &res) {
			t.Fatal("no backend")
		}
		if r.Pin && !d.Bound {
			threads.Unavailable() // the producer is gone: failed over
		}
		// Bound at once, so siblings fired before any answer follow.
		sessions.Bind(sk, d.Backend.Index, now)
		res.ReleasePrefill()
		table.Touch(r.Chain, d.Backend.Index, r.Now)
		res.ReleaseActive()
		return d
	}

	// Three sub-agent first turns of one session, each a prefix nobody
	// holds: all land where the first went.
	hdr := map[string]string{"x-claude-code-session-id": "cc-42"}
	first := route(canon.Messages, `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"task 0 of a new context"}]}`, hdr)
	for _, task := range []string{"task 1 of another context", "task 2 of yet another one"} {
		if d := route(canon.Messages, `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"`+task+`"}]}`, hdr); d.Backend != first.Backend || !d.Bound {
			t.Fatalf("sibling went to %d, first to %d", d.Backend.Index, first.Backend.Index)
		}
	}

	// A Responses API answer's id, learned from the stream, pins the
	// continuation to its producer even though its chain matches nothing.
	d := route(canon.Responses, `{"model":"m","input":"start a thread"}`, nil)
	var sc canon.ResponseIDScanner
	sc.Reset(true)
	sc.Write([]byte("event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_7\"}}\n\n"))
	threads.Bind(c.HashSessionKey(sc.ID()), d.Backend.Index, time.Now().UnixMilli())
	for i := 0; i < 3; i++ {
		cont := route(canon.Responses, `{"model":"m","previous_response_id":"resp_7","input":"go on"}`, nil)
		if cont.Backend != d.Backend || !cont.Bound {
			t.Fatalf("continuation went to %d, producer %d", cont.Backend.Index, d.Backend.Index)
		}
	}
	if st := threads.Stats(); st.Hits != 3 || st.Misses != 0 || st.Unavailable != 0 {
		t.Fatalf("%v", st)
	}
	// The producer goes away: the continuation fails over, counted.
	d.Backend.SetHealthy(false)
	if cont := route(canon.Responses, `{"model":"m","previous_response_id":"resp_7","input":"go on"}`, nil); cont.Backend == d.Backend || cont.Bound {
		t.Fatalf("continuation sent to an unhealthy producer: %+v", cont)
	}
	if st := threads.Stats(); st.Unavailable != 1 {
		t.Fatalf("%v", st)
	}
	if st := sessions.Stats(); st.Hits != 2 || st.Unavailable != 0 {
		t.Fatalf("%v", st)
	}
}
