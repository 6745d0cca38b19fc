package sched

import (
	"testing"
	"time"
)

// CheckCached: within the tolerance nothing changes; fewer cached than
// predicted bounds the backend's retention below the predicted prefix's
// age, which drops its locations that old (and nobody else's, and none
// learned since); a prefix found held raises it back; more, or a check
// without a known last access, drops nothing. The counters and the trust
// state follow.
func TestCheckCached(t *testing.T) {
	t.Parallel()
	s := newFixed(t, 2, "kvca-cost")
	now := s.Table.Now()
	old, fresh := chainOf(0, 10), chainOf(100, 10)
	s.Table.Touch(old, 0, now)
	s.Table.Touch(old, 1, now)
	s.Table.Touch(fresh, 0, now+5)
	b := s.Backends[0]
	at := time.Unix(1_000_000, 0)
	if st := s.Feedback(b, at); st.Trust != TrustUnreported || st.Checks != 0 {
		t.Fatalf("before any check: %+v", st)
	}
	check := func(pred, rep, tol int, last int64) int {
		return s.CheckCached(b, Check{PredictedBlocks: pred, ReportedBlocks: rep, PredictedTokens: int64(pred) * 64,
			ReportedTokens: int64(rep) * 64, PromptTokens: 1000, Tolerance: tol, LastAccess: last, Now: now + 6}, at)
	}
	held := func(c []uint64, be int) bool { return s.Table.Lookup(c[len(c)-1], now+6).Has(be) }
	if v := check(10, 8, 2, now); v != VerdictAgree || !held(old, 0) {
		t.Fatalf("within the tolerance: verdict %d, held %v", v, held(old, 0))
	}
	if v := check(10, 20, 2, now); v != VerdictOver || !held(old, 0) {
		t.Fatalf("more: verdict %d, held %v", v, held(old, 0))
	}
	if v := check(10, 7, 2, -1); v != VerdictUnder || !held(old, 0) {
		t.Fatalf("fewer, last access unknown: verdict %d, held %v", v, held(old, 0))
	}
	if v := check(10, 7, 2, now); v != VerdictUnder {
		t.Fatalf("fewer: verdict %d", v)
	}
	// One eviction halves the retention, from the TTL: one check that
	// misread the engine cannot make the table forget a backend.
	if r := s.Table.Retention(0); r != 30*time.Second || !held(old, 0) {
		t.Fatalf("retention %v after one eviction, old held %v", r, held(old, 0))
	}
	st := s.Feedback(b, at)
	if st.RetentionMs != 30_000 {
		t.Fatalf("state %+v", st)
	}
	if st.Checks != 4 || st.Under != 2 || st.Over != 1 || st.PredictedTokens != 4*640 || st.EngineCachedTokens != (8+20+7+7)*64 ||
		st.ErrorTokens != (2+10+3+3)*64 || st.PromptTokens != 4000 {
		t.Fatalf("counters %+v", st)
	}
	if st.Trust != TrustChecked || st.Drift <= 0 {
		t.Fatalf("3 of 4 disagreeing, decayed: %+v", st)
	}
	// Evicted again and again, the retention falls to the evicted
	// prefix's age, 6 ms: the backend's locations that old are gone, and
	// nobody else's, and none learned since.
	for range 13 {
		check(10, 7, 2, now)
	}
	if r := s.Table.Retention(0); r != 6*time.Millisecond {
		t.Fatalf("retention %v after evictions of a prefix 6 ms old", r)
	}
	if held(old, 0) || !held(old, 1) || !held(fresh, 0) {
		t.Fatalf("after the evictions: old on 0 %v (want false), old on 1 %v, fresh on 0 %v (want true)", held(old, 0), held(old, 1), held(fresh, 0))
	}
	for range 40 {
		check(10, 0, 2, -1)
	}
	if st := s.Feedback(b, at); st.Trust != TrustDrifting || st.Drift <= driftLimit {
		t.Fatalf("after 40 disagreements: %+v", st)
	}
	for range 200 {
		check(10, 10, 2, -1)
	}
	if st := s.Feedback(b, at); st.Trust != TrustChecked {
		t.Fatalf("after 200 agreements: %+v", st)
	}
	// A prefix 9 ms old found held: the engine keeps at least that.
	s.CheckCached(b, Check{PredictedBlocks: 10, ReportedBlocks: 10, Tolerance: 2, LastAccess: now + 11, Now: now + 20}, at)
	if r := s.Table.Retention(0); r != 10*time.Millisecond {
		t.Fatalf("retention %v after a hold 9 ms old", r)
	}
	// A younger one changes nothing; an eviction younger than the
	// retention lowers it.
	s.CheckCached(b, Check{PredictedBlocks: 10, ReportedBlocks: 10, Tolerance: 2, LastAccess: now + 16, Now: now + 20}, at)
	s.CheckCached(b, Check{PredictedBlocks: 10, ReportedBlocks: 0, Tolerance: 2, LastAccess: now + 17, Now: now + 20}, at)
	if r := s.Table.Retention(0); r != 5*time.Millisecond { // halved, not below
		t.Fatalf("retention %v", r)
	}
	// More held than predicted (what the retention dropped): it doubles,
	// and past the TTL it is lifted.
	s.CheckCached(b, Check{PredictedBlocks: 0, ReportedBlocks: 10, Tolerance: 2, LastAccess: -1, Now: now + 20}, at)
	if r := s.Table.Retention(0); r != 10*time.Millisecond {
		t.Fatalf("retention %v after a check holding more", r)
	}
	// More held than predicted, of a prefix older than twice the
	// retention: the retention rises to that age.
	s.CheckCached(b, Check{PredictedBlocks: 2, ReportedBlocks: 10, Tolerance: 2, LastAccess: now, Now: now + 40}, at)
	if r := s.Table.Retention(0); r != 41*time.Millisecond {
		t.Fatalf("retention %v after holding more of a prefix 40 ms old", r)
	}
	s.Table.SetRetention(0, 40*time.Second)
	s.CheckCached(b, Check{PredictedBlocks: 0, ReportedBlocks: 10, Tolerance: 2, LastAccess: -1, Now: now + 20}, at)
	if r := s.Table.Retention(0); r != 0 {
		t.Fatalf("retention %v doubled past the TTL", r)
	}
	if st := s.Feedback(b, at.Add(unreportedAfter+time.Second)); st.Trust != TrustUnreported {
		t.Fatalf("no report for a while: %+v", st)
	}
	if got := s.Feedback(s.Backends[1], at); got.Checks != 0 {
		t.Fatalf("another backend's record moved: %+v", got)
	}
}

func TestTolerance(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pred int
		bpt  float64
		bs   int
		eng  int
		want int
	}{
		{0, 4, 256, 16, 2},            // one block of kvca's, one of the engine's
		{80, 4, 256, 16, 12},          // and an eighth of the prediction
		{8, 4, 16, 16, 6},             // 64 bytes of engine block over 16-byte blocks
		{16, 4, 0, 16, 16},            // no block size: anything goes
		{100, 3.5, 64, 1, 1 + 1 + 12}, // a token-level cache
	} {
		if got := Tolerance(c.pred, c.bpt, c.bs, c.eng); got != c.want {
			t.Errorf("Tolerance(%d, %v, %d, %d) = %d, want %d", c.pred, c.bpt, c.bs, c.eng, got, c.want)
		}
	}
}

// lastAccessOf is the deepest predicted block's last access, -1 when
// nothing is predicted or it is not held; LastAccess takes the one a
// follow-up's holder pick read, and reads it otherwise.
func TestLastAccessOf(t *testing.T) {
	t.Parallel()
	s := newFixed(t, 2, "kvca")
	now := s.Table.Now()
	c := chainOf(0, 6)
	s.Table.Touch(c[:4], 1, now)
	s.Table.Touch(c[:2], 1, now+7)
	s.Table.Touch(c, 0, now+1) // the whole chain: n = len(c) reads its last block
	for _, tc := range []struct {
		n, b int
		want int64
	}{{0, 1, -1}, {2, 1, now + 7}, {4, 1, now}, {5, 1, -1}, {7, 1, -1}, {6, 0, now + 1}} {
		if got := s.lastAccessOf(c, tc.n, tc.b, now+8); got != tc.want {
			t.Errorf("LastAccessOf(%d blocks on %d) = %d, want %d", tc.n, tc.b, got, tc.want)
		}
	}
}

// The edges of a check's retention evidence: a prefix used at the very
// instant of the answer (age 0) is evidence; a check that predicted
// nothing cached is none.
func TestRetentionEvidenceEdges(t *testing.T) {
	t.Parallel()
	s := newFixed(t, 1, "kvca")
	b := s.Backends[0]
	at := time.Unix(1_000_000, 0)
	s.CheckCached(b, Check{PredictedBlocks: 0, ReportedBlocks: 0, Tolerance: -1, LastAccess: 5, Now: 10}, at)
	if r := s.Table.Retention(0); r != 0 {
		t.Fatalf("a check predicting nothing set retention %v", r)
	}
	s.Table.SetRetention(0, 8*time.Millisecond)
	s.CheckCached(b, Check{PredictedBlocks: 4, ReportedBlocks: 0, Tolerance: 1, LastAccess: 10, Now: 10}, at)
	if r := s.Table.Retention(0); r != 4*time.Millisecond {
		t.Fatalf("an eviction of a prefix 0 ms old: retention %v, want 4ms (halved)", r)
	}
	s.Table.SetRetention(0, time.Millisecond)
	s.CheckCached(b, Check{PredictedBlocks: 4, ReportedBlocks: 0, Tolerance: 1, LastAccess: 10, Now: 10}, at)
	if r := s.Table.Retention(0); r != time.Millisecond {
		t.Fatalf("an eviction at the least retention: %v, want 1ms", r)
	}
}

// LastAccess gives what the follow-up's holder pick read, however the
// table moved since; for a decision that read nothing it reads the table.
func TestLastAccessOfADecision(t *testing.T) {
	t.Parallel()
	s := newFixed(t, 2, "kvca")
	now := s.Table.Now()
	c := chainOf(0, 6)
	s.Table.Touch(c[:4], 1, now)
	r := &Request{Chain: c, Followup: true, Now: now + 9}
	var d Decision
	var res Reservation
	if !s.Route(r, &d, &res) || d.Backend.Index != 1 || d.Cached != 4 {
		t.Fatalf("follow-up: %+v", d)
	}
	s.Table.Touch(c, 1, now+9) // the answer learns the chain
	if got := s.LastAccess(r, &d); got != now {
		t.Fatalf("LastAccess %d, want %d as the pick read it", got, now)
	}
	res.ReleaseActive()
	d2 := Decision{Backend: s.Backends[1], Cached: 6}
	if got := s.LastAccess(r, &d2); got != now+9 {
		t.Fatalf("LastAccess of a decision that read nothing: %d, want %d", got, now+9)
	}
	if got := s.LastAccess(r, &Decision{}); got != -1 {
		t.Fatalf("LastAccess without a backend: %d", got)
	}
}
