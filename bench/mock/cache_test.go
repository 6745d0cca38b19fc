package mock

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
)

func TestCacheLRUEvictsTailFirst(t *testing.T) {
	c := newPrefixCache(4)
	c.insert([]uint64{1, 2, 3})
	// Inserted tail first, so the head of the prompt is the most recent.
	if got, want := c.keysLRU(), []uint64{3, 2, 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("LRU order %v, want %v", got, want)
	}
	c.insert([]uint64{1, 5})
	if got, want := c.keysLRU(), []uint64{3, 2, 5, 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("LRU order %v, want %v", got, want)
	}
	c.insert([]uint64{7, 8})
	if got, want := c.keysLRU(), []uint64{5, 1, 8, 7}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after eviction %v, want %v", got, want)
	}
	if n := c.match([]uint64{1, 2, 3}, 10); n != 1 {
		t.Fatalf("match = %d, want 1", n)
	}
	if n := c.match([]uint64{7, 8, 9}, 1); n != 1 {
		t.Fatalf("match with limit = %d, want 1", n)
	}
	c.reset()
	if c.len() != 0 || c.match([]uint64{7}, 1) != 0 {
		t.Fatal("reset kept blocks")
	}
}

func TestCacheZeroCapacity(t *testing.T) {
	c := newPrefixCache(0)
	c.insert([]uint64{1, 2})
	if c.len() != 0 {
		t.Fatal("zero-capacity cache stored blocks")
	}
}

func TestRenderIsAppendOnlyAcrossTurns(t *testing.T) {
	turn1 := `{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"system","content":"sys"},{"role":"user","content":"hi"}]}`
	turn2 := `{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"stream":true,"messages":[{"role":"system","content":"sys"},{"role":"user","content":"hi"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"1","content":[{"type":"text","text":"42"}]}]}`
	a, err := Render(nil, PathChat, []byte(turn1))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Render(nil, PathChat, []byte(turn2))
	if err != nil {
		t.Fatal(err)
	}
	want := "<|tools|>\n[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]\n<|system|>\nsys\n<|user|>\nhi\n<|assistant|>\n"
	if string(a) != want {
		t.Fatalf("render = %q, want %q", a, want)
	}
	if !bytes.HasPrefix(b, a) {
		t.Fatalf("turn 1 %q is not a prefix of turn 2 %q", a, b)
	}
	if !bytes.Contains(b, []byte("<|tool_call|>f {}\n<|tool|>\n42\n")) {
		t.Fatalf("tool call/tool message not rendered: %q", b)
	}
}

func TestRenderCompletionTokens(t *testing.T) {
	p, err := Render(nil, PathCompletions, []byte(`{"prompt":[1,2,70000]}`))
	if err != nil {
		t.Fatal(err)
	}
	if Tokens(p) != 3 || binary.LittleEndian.Uint32(p[8:]) != 70000 {
		t.Fatalf("token prompt rendered as %v", p)
	}
	for _, bad := range []string{`{"prompt":""}`, `{"prompt":[]}`, `{"prompt":[-1]}`, `{"prompt":["a","b"]}`, `{}`, `{"prompt":3}`} {
		if _, err := Render(nil, PathCompletions, []byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestBlockHashesChain(t *testing.T) {
	a := bytes.Repeat([]byte("abcd"), 40) // 40 tokens: 2 blocks of 16
	b := append(bytes.Clone(a[:64]), bytes.Repeat([]byte("zzzz"), 24)...)
	ha := BlockHashes(nil, a, 16)
	hb := BlockHashes(nil, b, 16)
	if len(ha) != 2 || len(hb) != 2 {
		t.Fatalf("block counts %d %d", len(ha), len(hb))
	}
	if ha[0] != hb[0] || ha[1] == hb[1] {
		t.Fatal("shared first block must hash equal, different second must differ")
	}
	// Same block content after a different prefix hashes differently.
	c := append(bytes.Repeat([]byte("zzzz"), 16), a[64:128]...)
	if BlockHashes(nil, c, 16)[1] == ha[1] {
		t.Fatal("hash is not chained")
	}
}
