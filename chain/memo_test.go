package chain_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/internal/bodies"
)

var memoKey = chain.Key{K0: 0x0706050403020100, K1: 0x0f0e0d0c0b0a0908}

// chainOf canonicalises body into a fresh chain, through m if not nil.
func chainOf(t testing.TB, c *canon.Canonicalizer, h *chain.Hasher, body []byte) ([]uint64, int) {
	t.Helper()
	h.Reset()
	var info canon.Info
	if err := c.Canonicalize(canon.Chat, body, h, &info); err != nil {
		t.Fatal(err)
	}
	return slices.Clone(h.Sum()), info.CBRLen
}

// memoBodies have long strings at many block offsets: a shared system
// prompt behind user turns of every length, a conversation that resends
// its history, escapes the literal fast path takes and ones it does not.
func memoBodies() [][]byte {
	long := strings.Repeat("You are a careful assistant. Answer \"exactly\".\n", 120)
	var out [][]byte
	for i := range 12 {
		msgs := []map[string]any{
			{"role": "system", "content": long},
			{"role": "user", "content": strings.Repeat("q", i*37) + "é\u00e9/"},
			{"role": "user", "content": long[:2048+i*13]},
		}
		b, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs, "n": i})
		out = append(out, b)
	}
	out = append(out, bodies.Conversation(8, 3000)...)
	out = append(out, bodies.Chat(128<<10))
	// A literal that is not canonString as sent (\u0041, \/) is decoded on
	// a miss; the memo keys on the literal, so it must still agree.
	out = append(out, []byte(`{"messages":[{"role":"user","content":"`+strings.Repeat(`\u0041\/x`, 600)+`"}]}`))
	return out
}

// With a memo, the chain is the one computed without it, on the first
// sight (miss), the second (admitted) and every later one (hits).
func TestMemoGivesTheSameChain(t *testing.T) {
	t.Parallel()
	for _, c := range []*canon.Canonicalizer{canon.New(nil), canon.NewWithOptions(nil, canon.Options{NoSession: true})} {
		memoSameChain(t, c)
	}
}

func memoSameChain(t *testing.T, c *canon.Canonicalizer) {
	plain := chain.NewHasher(memoKey, 64)
	m := chain.NewMemo(64 << 20)
	memo := chain.NewHasher(memoKey, 64)
	memo.UseMemo(m)
	bs := memoBodies()
	chainOf(t, c, memo, bs[len(bs)-1])
	if m.Len() != 0 {
		t.Fatalf("after one sight %d literals are remembered, want 0", m.Len())
	}
	for pass := range 4 {
		for i, body := range bs {
			want, wantLen := chainOf(t, c, plain, body)
			got, gotLen := chainOf(t, c, memo, body)
			if !slices.Equal(got, want) || gotLen != wantLen {
				t.Fatalf("pass %d body %d: memo chain differs (%d blocks, CBR %d; want %d, %d)", pass, i, len(got), gotLen, len(want), wantLen)
			}
		}
	}
	if m.Len() == 0 {
		t.Fatal("nothing remembered after repeated bodies")
	}
}

// The same literal after a different prefix (another block offset, or
// another previous hash) is a different entry, never a wrong hit.
func TestMemoKeysOnTheChainState(t *testing.T) {
	t.Parallel()
	c := canon.NewWithOptions(nil, canon.Options{NoSession: true})
	plain := chain.NewHasher(memoKey, 64)
	m := chain.NewMemo(64 << 20)
	memo := chain.NewHasher(memoKey, 64)
	memo.UseMemo(m)
	doc := strings.Repeat("shared document text ", 200)
	for round := range 3 {
		for pre := range 70 {
			b, _ := json.Marshal(map[string]any{"messages": []map[string]any{
				{"role": "system", "content": strings.Repeat("p", pre)},
				{"role": "user", "content": doc},
			}})
			want, _ := chainOf(t, c, plain, b)
			got, _ := chainOf(t, c, memo, b)
			if !slices.Equal(got, want) {
				t.Fatalf("round %d prefix %d: memo chain differs", round, pre)
			}
		}
	}
}

func TestMemoIsBounded(t *testing.T) {
	t.Parallel()
	c := canon.NewWithOptions(nil, canon.Options{NoSession: true})
	m := chain.NewMemo(64 << 10)
	h := chain.NewHasher(memoKey, 64)
	h.UseMemo(m)
	for i := range 200 {
		b, _ := json.Marshal(map[string]any{"messages": []map[string]any{
			{"role": "user", "content": fmt.Sprintf("%d %s", i, strings.Repeat("x", 3000))},
		}})
		chainOf(t, c, h, b)
		chainOf(t, c, h, b)
	}
	if st := m.Stats(); st.Literals == 0 || st.Bytes > 64<<10 || st.Literals > (64<<10)/3000 {
		t.Fatalf("in 64 KB: %+v", st)
	}
	if chain.NewMemo(0) != nil {
		t.Fatal("NewMemo(0) should remember nothing (nil)")
	}
}

func TestMemoConcurrentUse(t *testing.T) {
	t.Parallel()
	c := canon.NewWithOptions(nil, canon.Options{NoSession: true})
	m := chain.NewMemo(1 << 20)
	bs := memoBodies()
	want := make([][]uint64, len(bs))
	plain := chain.NewHasher(memoKey, 64)
	for i, b := range bs {
		want[i], _ = chainOf(t, c, plain, b)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := chain.NewHasher(memoKey, 64)
			h.UseMemo(m)
			for k := range 60 {
				i := (g + k) % len(bs)
				h.Reset()
				var info canon.Info
				if err := c.Canonicalize(canon.Chat, bs[i], h, &info); err != nil {
					errs <- err.Error()
					return
				}
				if !slices.Equal(h.Sum(), want[i]) {
					errs <- fmt.Sprintf("goroutine %d body %d: wrong chain", g, i)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestMemoHitsNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race")
	}
	c := canon.NewWithOptions(nil, canon.Options{NoSession: true})
	h := chain.NewHasher(memoKey, 256)
	h.UseMemo(chain.NewMemo(64 << 20))
	body := bodies.Chat(128 << 10)
	for range 3 {
		chainOf(t, c, h, body)
	}
	var info canon.Info
	if n := testing.AllocsPerRun(50, func() {
		h.Reset()
		_ = c.Canonicalize(canon.Chat, body, h, &info)
	}); n != 0 {
		t.Fatalf("%v allocs per request", n)
	}
}

// FuzzMemo: for any body, three passes through a memo give the chain of a
// Hasher without one.
func FuzzMemo(f *testing.F) {
	for _, b := range memoBodies() {
		if len(b) < 16<<10 {
			f.Add(b)
		}
	}
	c := canon.NewWithOptions(nil, canon.Options{NoSession: true})
	plain := chain.NewHasher(memoKey, 64)
	memo := chain.NewHasher(memoKey, 64)
	memo.UseMemo(chain.NewMemo(1 << 20))
	f.Fuzz(func(t *testing.T, body []byte) {
		plain.Reset()
		var info canon.Info
		if c.Canonicalize(canon.Chat, body, plain, &info) != nil {
			return
		}
		want := slices.Clone(plain.Sum())
		for pass := range 3 {
			memo.Reset()
			if err := c.Canonicalize(canon.Chat, body, memo, &info); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(memo.Sum(), want) {
				t.Fatalf("pass %d: memo chain differs", pass)
			}
		}
	})
}
