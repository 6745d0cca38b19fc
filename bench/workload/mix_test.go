package workload

import (
	"encoding/json"
	"testing"
	"time"
)

func TestSetClassKeepsConversationsWhole(t *testing.T) {
	t.Parallel()
	gen := func() *Workload {
		return Synthetic{Seed: 3, Sessions: 200, MinTurns: 2, MaxTurns: 4, SystemPromptTokens: 16, UserTokens: 8, OutputTokens: 2}.Generate()
	}
	w := gen()
	SetClass(w, "high", 0.1, 5)
	class := map[int]string{}
	high := 0
	for _, r := range w.Requests {
		if c, ok := class[r.Session]; ok && c != r.Class {
			t.Fatalf("session %d has classes %q and %q", r.Session, c, r.Class)
		}
		if _, ok := class[r.Session]; !ok && r.Class == "high" {
			high++
		}
		class[r.Session] = r.Class
		if r.Class != "" && r.Class != "high" {
			t.Fatalf("class %q", r.Class)
		}
	}
	// 10% of 200 sessions, within what a fair coin allows.
	if high < 8 || high > 35 {
		t.Fatalf("%d of 200 sessions high", high)
	}
	// The same seed chooses the same sessions.
	v := gen()
	SetClass(v, "high", 0.1, 5)
	for i := range w.Requests {
		if w.Requests[i].Class != v.Requests[i].Class {
			t.Fatalf("request %d: %q then %q", i, w.Requests[i].Class, v.Requests[i].Class)
		}
	}
}

func TestSetBodyPriority(t *testing.T) {
	t.Parallel()
	w := Synthetic{Seed: 3, Sessions: 40, MinTurns: 2, MaxTurns: 3, SystemPromptTokens: 16, UserTokens: 8, OutputTokens: 2}.Generate()
	SetClass(w, "high", 0.5, 5)
	SetBodyPriority(w, "high", -1)
	for i, r := range w.Requests {
		var body map[string]any
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatalf("request %d: %v: %s", i, err, r.Body)
		}
		p, has := body["priority"]
		if (r.Class == "high") != has || has && p != float64(-1) {
			t.Fatalf("request %d class %q: priority %v", i, r.Class, p)
		}
	}
	if got := string(withPriority([]byte("{}"), 2)); got != `{"priority":2}` {
		t.Fatalf("empty object: %s", got)
	}
}

func TestTenantsAndMerge(t *testing.T) {
	t.Parallel()
	a := &Workload{Requests: []Request{{At: 0, Session: 0}, {At: 2 * time.Millisecond, Session: 1}, {At: 4 * time.Millisecond, Session: 2}, {At: 6 * time.Millisecond, Session: 0, Turn: 1}}}
	b := &Workload{Requests: []Request{{At: time.Millisecond, Session: 0}, {At: 5 * time.Millisecond, Session: 1}}}
	SpreadTenants(a, "t", 2)
	SetTenant(b, "flooder")
	m := Merge("m", a, b)
	type rt struct {
		at      time.Duration
		session int
		tenant  string
	}
	want := []rt{{0, 0, "t0"}, {time.Millisecond, 3, "flooder"}, {2 * time.Millisecond, 1, "t1"}, {4 * time.Millisecond, 2, "t0"},
		{5 * time.Millisecond, 4, "flooder"}, {6 * time.Millisecond, 0, "t0"}}
	if m.Name != "m" || len(m.Requests) != len(want) {
		t.Fatalf("%q: %d requests", m.Name, len(m.Requests))
	}
	for i, w := range want {
		r := m.Requests[i]
		if (rt{r.At, r.Session, r.Tenant}) != w {
			t.Fatalf("request %d: %v %d %q, want %v", i, r.At, r.Session, r.Tenant, w)
		}
	}
	// The inputs are left as they were.
	if b.Requests[1].Session != 1 || len(a.Requests) != 4 {
		t.Fatal("Merge changed its inputs")
	}
}
