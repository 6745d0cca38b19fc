package canon_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/internal/bodies"
)

// result is everything a request's canonicalisation hands the edge.
type result struct {
	chain   []uint64
	partial []byte
	info    canon.Info
	err     error
}

func (r result) String() string {
	return fmt.Sprintf("err=%v blocks=%d partial=%q followup=%v model=%q session=%x messages=%d cbr=%d prev=%q cache=%x user=%x prio=%q",
		r.err, len(r.chain), r.partial, r.info.Followup, r.info.Model, r.info.Session, r.info.Messages, r.info.CBRLen,
		r.info.PreviousResponseID, r.info.CacheKey, r.info.UserKey, r.info.Priority)
}

func equalResults(a, b result) bool {
	if (a.err == nil) != (b.err == nil) || (a.err != nil && a.err != b.err) {
		return false
	}
	if a.err != nil {
		return true
	}
	ia, ib := a.info, b.info
	return slices.Equal(a.chain, b.chain) && string(a.partial) == string(b.partial) &&
		ia.Followup == ib.Followup && string(ia.Model) == string(ib.Model) && ia.Session == ib.Session &&
		ia.Messages == ib.Messages && ia.CBRLen == ib.CBRLen && string(ia.PreviousResponseID) == string(ib.PreviousResponseID) &&
		ia.CacheKey == ib.CacheKey && ia.UserKey == ib.UserKey && string(ia.Priority) == string(ib.Priority)
}

// canonWith canonicalises body into h (reset first) and copies the outcome.
func canonWith(c *canon.Canonicalizer, h *chain.Hasher, api canon.API, body []byte) result {
	h.Reset()
	var info canon.Info
	err := c.Canonicalize(api, body, h, &info)
	return result{chain: slices.Clone(h.Sum()), partial: slices.Clone(h.Partial()), info: cloneInfo(info), err: err}
}

func cloneInfo(i canon.Info) canon.Info {
	i.Model = slices.Clone(i.Model)
	i.PreviousResponseID = slices.Clone(i.PreviousResponseID)
	i.Priority = slices.Clone(i.Priority)
	return i
}

var testKey = chain.Key{K0: 0x0706050403020100, K1: 0x0f0e0d0c0b0a0908}

// pair is a cold Canonicalizer and one that resumes, with the same options.
type pair struct {
	cold, warm *canon.Canonicalizer
	r          *canon.Resumer
	hc, hw     *chain.Hasher
}

func newPair(opts canon.Options, budget, blockSize int) *pair {
	p := &pair{cold: canon.NewWithOptions(nil, opts), warm: canon.NewWithOptions(nil, opts), r: canon.NewResumer(budget)}
	p.warm.UseResumer(p.r)
	p.hc, p.hw = chain.NewHasher(testKey, blockSize), chain.NewHasher(testKey, blockSize)
	return p
}

// check canonicalises body both ways and fails on any difference.
func (p *pair) check(t testing.TB, api canon.API, body []byte) result {
	t.Helper()
	want := canonWith(p.cold, p.hc, api, body)
	got := canonWith(p.warm, p.hw, api, body)
	if !equalResults(got, want) {
		t.Fatalf("%v body %q\n got %v\nwant %v", api, body, got, want)
	}
	return got
}

func TestResumeFollowups(t *testing.T) {
	t.Parallel()
	for _, opts := range []canon.Options{{}, {NoSession: true}} {
		p := newPair(opts, 64<<20, 64)
		conv := bodies.Conversation(12, 3000)
		for _, b := range conv {
			p.check(t, canon.Chat, b)
		}
		for _, b := range conv { // again: every one a hit
			p.check(t, canon.Chat, b)
		}
		st := p.r.Stats()
		if st.Hits < uint64(len(conv)+len(conv)-1) || st.Skipped == 0 {
			t.Fatalf("stats %+v", st)
		}
	}
}
