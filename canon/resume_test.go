package canon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
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
	if want.info.PromptEnd != 0 {
		t.Fatalf("%v body %q: PromptEnd %d without a resumer", api, body, want.info.PromptEnd)
	}
	if got.err == nil && got.info.PromptEnd != 0 {
		checkPromptEnd(t, api, body, got.info.PromptEnd)
	}
	return got
}

// checkPromptEnd fails unless end is the offset of the closing bracket of
// body's prompt array, and that array is its only top-level member of the
// prompt's name, as a JSON decoder finds them.
func checkPromptEnd(t testing.TB, api canon.API, body []byte, end int) {
	t.Helper()
	key := map[canon.API]string{canon.Chat: "messages", canon.Messages: "messages", canon.Responses: "input", canon.Completions: "prompt"}[api]
	d := json.NewDecoder(bytes.NewReader(body))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("body %q: not an object", body)
	}
	found := -1
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		if tok == key {
			if found >= 0 {
				t.Fatalf("body %q names %s twice, yet PromptEnd is %d", body, key, end)
			}
			found = int(d.InputOffset()) - 1
		}
	}
	if found != end || body[end] != ']' {
		t.Fatalf("body %q: PromptEnd %d, the prompt array ends at %d", body, end, found)
	}
}

// TestPromptEnd: the prompt array's end is reported for a body the
// resumer recorded cold and for one it resumed, never without a resumer,
// and not for a body that names its prompt twice (which is not recorded).
func TestPromptEnd(t *testing.T) {
	t.Parallel()
	p := newPair(canon.Options{}, 64<<20, 64)
	conv := bodies.Conversation(4, 300)
	for _, b := range conv {
		got := p.check(t, canon.Chat, b)
		if got.info.PromptEnd == 0 {
			t.Fatalf("no PromptEnd for %q", b)
		}
	}
	if st := p.r.Stats(); st.Hits == 0 {
		t.Fatalf("nothing resumed: %+v", st)
	}
	twice := []byte(`{"messages":[{"role":"user","content":"a"}],"stream":true,"messages":[{"role":"user","content":"b"}],"model":"m"}`)
	for range 2 {
		if got := p.check(t, canon.Chat, twice); got.info.PromptEnd != 0 {
			t.Fatalf("PromptEnd %d for a body naming messages twice", got.info.PromptEnd)
		}
	}
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
	// The budget as an option: kvca serve's way.
	c := canon.NewWithOptions(nil, canon.Options{ResumeMemoBytes: 1 << 20})
	h := chain.NewHasher(testKey, 256)
	for _, b := range bodies.Conversation(3, 500) {
		canonWith(c, h, canon.Chat, b)
	}
	if st := c.ResumeStats(); st.Hits != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestResumeVectors passes every test vector through a resuming
// Canonicalizer twice (the second time resumed from the first) and each
// vector's body grown by a message, against the vector's chain and the
// cold path.
func TestResumeVectors(t *testing.T) {
	t.Parallel()
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			api, err := canon.ParseAPI(v.API)
			if err != nil {
				t.Fatal(err)
			}
			key, err := chain.ParseKey(v.KeyHex)
			if err != nil {
				t.Fatal(err)
			}
			c := canon.New(nil)
			r := canon.NewResumer(1 << 20)
			canon.SetSnapEvery(r, 0)
			c.UseResumer(r)
			h := chain.NewHasher(key, v.BlockSize)
			for range 2 {
				got := canonWith(c, h, api, []byte(v.Request))
				if got.err != nil {
					t.Fatal(got.err)
				}
				var want []string
				for _, x := range got.chain {
					want = append(want, fmt.Sprintf("%016x", x))
				}
				if fmt.Sprint(want) != fmt.Sprint(v.Chain) || got.info.CBRLen != len(v.CBR) {
					t.Fatalf("chain %v (cbr %d)\nwant %v (cbr %d)", want, got.info.CBRLen, v.Chain, len(v.CBR))
				}
			}
			p := &pair{cold: canon.New(nil), warm: c, r: r, hc: chain.NewHasher(key, v.BlockSize), hw: h}
			// The vector's body with one more message at the end of its
			// prompt array, if it has one: resumed from the vector's.
			req := v.Request
			for _, name := range []string{`"messages":[`, `"input":[`} {
				if i := strings.Index(req, name); i >= 0 {
					if j := strings.LastIndex(req, "}]"); j > i {
						grown := req[:j+1] + `,{"role":"user","content":"and one more thing"}` + req[j+1:]
						p.check(t, api, []byte(grown))
					}
				}
			}
		})
	}
}

// TestResumeRace runs conversations on many goroutines sharing one
// Resumer with a budget that keeps it evicting; every result must be the
// cold one (run with -race).
func TestResumeRace(t *testing.T) {
	t.Parallel()
	conv := bodies.Conversation(16, 2000)
	cold := canon.New(nil)
	want := make([]result, len(conv))
	for i, b := range conv {
		want[i] = canonWith(cold, chain.NewHasher(testKey, 64), canon.Chat, b)
	}
	c := canon.New(nil)
	r := canon.NewResumer(256 << 10)
	canon.SetSnapEvery(r, 1024)
	c.UseResumer(r)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			h := chain.NewHasher(testKey, 64)
			rnd := rand.New(rand.NewPCG(uint64(g), 7))
			for range 200 {
				i := rnd.IntN(len(conv))
				if got := canonWith(c, h, canon.Chat, conv[i]); !equalResults(got, want[i]) {
					t.Errorf("turn %d\n got %v\nwant %v", i, got, want[i])
					return
				}
			}
		})
	}
	wg.Wait()
	if st := r.Stats(); st.Hits == 0 || st.Bytes > 256<<10 {
		t.Fatalf("stats %+v", st)
	}
	if err := canon.CheckResumer(r); err != nil {
		t.Fatal(err)
	}
}

// TestResumeNoAllocs: a request resumed from a known body (here the same
// body again, and a follow-up to a known one whose record fits in place)
// allocates nothing; nor, once the Resumer has filled its budget, does
// recording a follow-up seen for the first time or a body that nothing
// resumes: they reuse what eviction freed.
func TestResumeNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	c := canon.NewWithOptions(nil, canon.Options{NoSession: true})
	c.UseResumer(canon.NewResumer(64 << 20))
	h := chain.NewHasher(testKey, 256)
	body := bodies.Chat(128 << 10)
	var info canon.Info
	for range 3 {
		h.Reset()
		if err := c.Canonicalize(canon.Chat, body, h, &info); err != nil {
			t.Fatal(err)
		}
	}
	hits := c.ResumeStats().Hits
	if n := testing.AllocsPerRun(100, func() {
		h.Reset()
		if err := c.Canonicalize(canon.Chat, body, h, &info); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per resumed request", n)
	}
	if c.ResumeStats().Hits < hits+100 {
		t.Fatal("not resumed")
	}

	// Each body new from its stamp on: a follow-up recorded (the history
	// resumed) and a first sight (the stamp in the first message).
	hist := bodies.Chat(64 << 10)
	end := strings.LastIndex(string(hist), "}]")
	follow := []byte(string(hist[:end+1]) + `,{"role":"user","content":"@@@@@@@@ and then?"}` + string(hist[end+1:]))
	first := []byte(strings.Replace(string(hist), `"content":"`, `"content":"@@@@@@@@`, 1))
	for _, tc := range []struct {
		name    string
		body    []byte
		resumed bool
	}{{"follow-up", follow, true}, {"first sight", first, false}} {
		t.Run(tc.name, func(t *testing.T) {
			c := canon.NewWithOptions(nil, canon.Options{NoSession: true})
			r := canon.NewResumer(2 << 20)
			c.UseResumer(r)
			at := strings.Index(string(tc.body), "@@@@@@@@")
			var i uint64
			next := func() {
				i++
				for k := range 8 {
					tc.body[at+k] = 'a' + byte(i>>(4*k)&15)
				}
				h.Reset()
				if err := c.Canonicalize(canon.Chat, tc.body, h, &info); err != nil {
					t.Fatal(err)
				}
			}
			h.Reset()
			if err := c.Canonicalize(canon.Chat, hist, h, &info); err != nil {
				t.Fatal(err)
			}
			for r.Stats().Evictions < 100 {
				next()
			}
			before := r.Stats()
			if n := testing.AllocsPerRun(200, next); n != 0 {
				t.Fatalf("%v allocations per request recorded", n)
			}
			st := r.Stats()
			if tc.resumed && st.Hits < before.Hits+200 || !tc.resumed && st.Misses < before.Misses+200 {
				t.Fatalf("stats %+v before %+v", st, before)
			}
			if st.Snapshots <= before.Snapshots/2 || st.Evictions == before.Evictions {
				t.Fatalf("not recorded: stats %+v before %+v", st, before)
			}
			if err := canon.CheckResumer(r); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Likely estimates how much of a body the resumer remembers from each
// remembered run's ends: a follow-up's whole history, a body seen before
// up to its prompt's end, an earlier turn and a body leaving a run inside
// it up to about where they leave it, nothing of an unrelated one or of another hasher's, and (the
// estimate's known blind spot) all of a body changed only inside a run.
func TestLikely(t *testing.T) {
	p := newPair(canon.Options{}, 64<<20, 64)
	conv := bodies.Conversation(6, 3000)
	for _, b := range conv[:5] {
		p.check(t, canon.Chat, b)
	}
	tag := p.hw.ResumeTag()
	// The tree keeps a body's bytes up to its prompt array's end (what
	// follows is kept with the snapshots).
	if got := p.r.Likely(canon.Chat, tag, conv[4]); got < len(conv[4])-64 {
		t.Errorf("a body seen before: %d of %d", got, len(conv[4]))
	}
	// An earlier turn again (a retry, a regenerated answer, a replayed
	// session): the remembered run goes on where the body's messages end,
	// so the run's last bytes say nothing; all but its closing fields are
	// still found.
	if got := p.r.Likely(canon.Chat, tag, conv[2]); got < len(conv[2])-200 || got > len(conv[2]) {
		t.Errorf("an earlier body of the conversation: %d of %d", got, len(conv[2]))
	}
	at := len(conv[2]) + 500 // inside a later message: a run of the tree
	fork := append(bytes.Clone(conv[3][:at]), bytes.Repeat([]byte("x"), 5000)...)
	if got := p.r.Likely(canon.Chat, tag, fork); got < at-2*64 || got > at {
		t.Errorf("a body leaving the run at %d: %d", at, got)
	}
	next := conv[5]
	if got, hist := p.r.Likely(canon.Chat, tag, next), len(conv[4])-64; got < hist || got > len(next)-3000 {
		t.Errorf("a follow-up: %d of %d, its history %d", got, len(next), hist)
	}
	// Another conversation with the same system prompt: about the bytes
	// they share.
	other := bodies.Conversation(2, 500)[1]
	if got, shared := p.r.Likely(canon.Chat, tag, other), prefixLen(conv[4], other); got < shared-2*64 || got > shared {
		t.Errorf("a body sharing %d bytes: %d", shared, got)
	}
	if got := p.r.Likely(canon.Chat, chain.NewHasher(testKey, 128).ResumeTag(), conv[4]); got != 0 {
		t.Errorf("another hasher's body: %d", got)
	}
	if got := p.r.Likely(canon.Completions, tag, conv[4]); got != 0 {
		t.Errorf("completions: %d", got)
	}
	changed := bytes.Clone(conv[4])
	mid := len(changed) / 2
	changed[mid] ^= 1
	if got := p.r.Likely(canon.Chat, tag, changed); got < mid {
		t.Errorf("a byte changed inside a run: %d", got)
	}
	var none *canon.Resumer
	if none.Likely(canon.Chat, tag, conv[4]) != 0 {
		t.Error("a nil resumer remembers something")
	}
}

func prefixLen(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestRawControlBytes: a string holding a raw control byte is no JSON
// (RFC 8259 §7), which fastjson lets through; every such body is refused
// as malformed, cold and resuming a conversation whose earlier turns were
// sound, wherever the byte is; bodies encoding/json takes pass. The
// earlier turn is resumed from: the byte comes in what the resumer parses.
func TestRawControlBytes(t *testing.T) {
	t.Parallel()
	first := `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello there"}],"stream":true}`
	turn := func(content, tail string) string {
		return `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello there"},` +
			`{"role":"assistant","content":"hi"},{"role":"user","content":"` + content + `"}]` + tail + `}`
	}
	bad := []string{
		turn("a\nb", `,"stream":true`),
		turn("a\x00\\nb", `,"stream":true`), // a raw byte before an escape
		turn("a\\nb\x1f", `,"stream":true`), // and after one
		turn("ok", ",\"stream\":true,\"user\":\"x\ty\""),
		turn("ok", ",\"stop\":[\"\n\"]"),
		turn("ok", ",\"metadata\":{\"note\":\"a\rb\"}"),
		turn("ok", ",\"x_trace\":\"a\x01b\""),
		"{\"model\":\"m\n\",\"messages\":[{\"role\":\"user\",\"content\":\"hello there\"}]}",
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a` + "\t" + `b"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":"ok"}],"tools":[{"type":"function","function":{"name":"f","description":"a` + "\n" + `b"}}]}`,
	}
	good := []string{
		turn(`a\nb\t\u0000`, `,"stream":true`),
		"{\n\t\"model\": \"m\",\r\n\t\"messages\": [ {\"role\": \"user\", \"content\": \"hello there\"} ]\n}",
	}
	p := newPair(canon.Options{}, 1<<20, 16)
	for _, body := range append(bad, good...) {
		if !json.Valid([]byte(body)) == slices.Contains(good, body) {
			t.Fatalf("%q: the test's own sorting is wrong", body)
		}
		p.check(t, canon.Chat, []byte(first)) // remembered, to resume from
		want := canon.ErrMalformed
		if slices.Contains(good, body) {
			want = nil
		}
		if got := p.check(t, canon.Chat, []byte(body)); got.err != want {
			t.Fatalf("%q: %v, want %v", body, got.err, want)
		}
	}
}

// TestRawControlBytesOtherAPIs: the same refusal for the Messages API's
// system prompt and blocks and the Responses API's input and
// instructions.
func TestRawControlBytesOtherAPIs(t *testing.T) {
	t.Parallel()
	c := canon.New(nil)
	for _, tc := range []struct {
		api  canon.API
		body string
	}{
		{canon.Messages, "{\"model\":\"m\",\"max_tokens\":8,\"system\":\"be\nbrief\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"},
		{canon.Messages, "{\"model\":\"m\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"h\ti\"}]}]}"},
		{canon.Responses, "{\"model\":\"m\",\"input\":\"h\x02i\"}"},
		{canon.Responses, "{\"model\":\"m\",\"instructions\":\"be\rbrief\",\"input\":\"hi\"}"},
		{canon.Completions, "{\"model\":\"m\",\"prompt\":\"h\ni\"}"},
	} {
		if json.Valid([]byte(tc.body)) {
			t.Fatalf("%q is JSON", tc.body)
		}
		if r := canonWith(c, chain.NewHasher(testKey, 16), tc.api, []byte(tc.body)); r.err != canon.ErrMalformed {
			t.Fatalf("%v %q: %v, want %v", tc.api, tc.body, r.err, canon.ErrMalformed)
		}
	}
}
