package chain

import "testing"

// entryOf builds a memo entry with a chosen fingerprint and byte sizes.
func entryOf(fp uint64, before, lit, after, hashes int) *memoEntry {
	return &memoEntry{fp: fp, before: make([]byte, before), lit: make([]byte, lit), after: make([]byte, after), hashes: make([]uint64, hashes)}
}

func TestMemoEntrySize(t *testing.T) {
	t.Parallel()
	if got, want := entryOf(1, 10, 300, 20, 4).size(), 10+300+20+8*4+memoOverhead; got != want {
		t.Fatalf("size %d, want %d", got, want)
	}
}

// TestMemoSlots: one slot per 256 bytes, a power of two, at least 64.
func TestMemoSlots(t *testing.T) {
	t.Parallel()
	for max, want := range map[int]int{1: 64, 64 * 256: 64, 64*256 + 1: 64, 65 * 256: 128, 128 * 256: 128, 1 << 20: 4096} {
		if got := len(NewMemo(max).slots); got != want {
			t.Errorf("NewMemo(%d): %d slots, want %d", max, got, want)
		}
	}
}

// TestMemoByteBound: entries up to the bound are kept exactly, the oldest
// goes first when a new one would exceed it, and one larger than the
// whole bound is not stored.
func TestMemoByteBound(t *testing.T) {
	t.Parallel()
	one := entryOf(0, 8, 512, 8, 0).size()
	m := NewMemo(3 * one)
	fps := []uint64{2, 4, 6, 8}
	for i, fp := range fps[:3] {
		m.store(entryOf(fp, 8, 512, 8, 0))
		if st := m.Stats(); st.Literals != i+1 || st.Bytes != (i+1)*one {
			t.Fatalf("after %d stores: %+v, want %d literals in %d bytes", i+1, st, i+1, (i+1)*one)
		}
	}
	m.store(entryOf(fps[3], 8, 512, 8, 0))
	if st := m.Stats(); st.Literals != 3 || st.Bytes != 3*one {
		t.Fatalf("past the bound: %+v", st)
	}
	if m.slots[2].Load() != nil || m.slots[4].Load() == nil || m.slots[8].Load() == nil {
		t.Fatal("the oldest entry was not the one evicted")
	}
	if len(m.fifo) != 3 {
		t.Fatalf("fifo keeps %d entries for 3 live", len(m.fifo))
	}
	m.store(entryOf(10, 8, 3*one, 8, 0))
	if st := m.Stats(); st.Literals != 3 || m.slots[10].Load() != nil {
		t.Fatalf("an entry larger than the bound was stored: %+v", st)
	}
	exact := NewMemo(one)
	exact.store(entryOf(2, 8, 512, 8, 0))
	if st := exact.Stats(); st.Literals != 1 {
		t.Fatalf("an entry exactly the bound's size was refused: %+v", st)
	}
}

// TestMemoReplacesTheOlderOfAPair: a third fingerprint meeting two in one
// slot pair replaces the older of them.
func TestMemoReplacesTheOlderOfAPair(t *testing.T) {
	t.Parallel()
	m := NewMemo(1 << 20)
	span := m.mask + 1
	older, newer := entryOf(2, 8, 300, 8, 0), entryOf(3, 8, 300, 8, 0)
	m.store(older)
	m.store(newer)
	third := entryOf(2+span, 8, 300, 8, 0)
	m.store(third)
	if m.slots[2].Load() != third || m.slots[3].Load() != newer || !older.dead || newer.dead {
		t.Fatalf("slots %p %p, want the third (%p) where the older was and the newer (%p) kept", m.slots[2].Load(), m.slots[3].Load(), third, newer)
	}
	if st := m.Stats(); st.Literals != 2 {
		t.Fatalf("%d literals, want 2", st.Literals)
	}
}

// TestMemoFifoStaysShort: entries replaced in their slot linger in the
// store order only until it holds more than 2×live+64.
func TestMemoFifoStaysShort(t *testing.T) {
	t.Parallel()
	m := NewMemo(1 << 20)
	for i := 1; i <= 66; i++ {
		m.store(entryOf(2, 8, 300, 8, 0))
		if len(m.fifo) != i {
			t.Fatalf("after %d replacements fifo holds %d", i, len(m.fifo))
		}
	}
	m.store(entryOf(2, 8, 300, 8, 0))
	if len(m.fifo) != 1 || m.Stats().Literals != 1 {
		t.Fatalf("after 67 replacements fifo holds %d, %d live", len(m.fifo), m.Stats().Literals)
	}
}

// TestMemoMinLiteral: a literal of exactly MemoMinLiteral bytes is
// remembered (from its second sight), one byte less never.
func TestMemoMinLiteral(t *testing.T) {
	t.Parallel()
	for _, n := range []int{MemoMinLiteral - 1, MemoMinLiteral} {
		m := NewMemo(1 << 20)
		lit := make([]byte, n)
		for i := range lit {
			lit[i] = 'a' + byte(i%26)
		}
		for range 2 {
			h := NewHasher(Key{1, 2}, 64)
			h.UseMemo(m)
			if _, ok := h.SkipLiteral(lit); ok {
				t.Fatalf("%d bytes: hit before anything was stored", n)
			}
			h.Write(lit)
			h.WroteLiteral(lit, len(lit))
		}
		want := 0
		if n >= MemoMinLiteral {
			want = 1
		}
		if got := m.Len(); got != want {
			t.Errorf("literal of %d bytes: %d remembered, want %d", n, got, want)
		}
	}
}

// TestMemoFifoBoundGrowsWithLive: with two live entries the store order
// may hold 2×2+64 = 68 before it is compacted.
func TestMemoFifoBoundGrowsWithLive(t *testing.T) {
	t.Parallel()
	m := NewMemo(1 << 20)
	m.store(entryOf(4, 8, 300, 8, 0)) // stays live
	for i := 1; i <= 67; i++ {
		m.store(entryOf(2, 8, 300, 8, 0))
	}
	if len(m.fifo) != 68 {
		t.Fatalf("fifo holds %d, want 68 (not compacted yet)", len(m.fifo))
	}
	m.store(entryOf(2, 8, 300, 8, 0))
	if len(m.fifo) != 2 || m.Stats().Literals != 2 {
		t.Fatalf("fifo holds %d with %d live, want 2 and 2", len(m.fifo), m.Stats().Literals)
	}
}
