package canon

import "fmt"

// NewDecoding returns a Canonicalizer that decodes and re-escapes every
// string, the reference the literal fast path is checked against.
func NewDecoding(extraExclude []string) *Canonicalizer {
	c := New(extraExclude)
	c.decodeStrings = true
	return c
}

// CanonicalLiteral exposes canonicalLiteral to the tests.
var CanonicalLiteral = canonicalLiteral

// SetSnapEvery makes r remember boundaries every n CBR bytes (0: all).
func SetSnapEvery(r *Resumer, n int) { r.every = n }

// CheckResumer recounts what r holds, its trees and free lists, and
// fails unless that is what r counted and within its budget.
func CheckResumer(r *Resumer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	held, free, nodes, snaps := 0, 0, 0, 0
	vars := map[*rzVariant]int{}
	var visit func(n *rzNode) error
	visit = func(n *rzNode) error {
		nodes++
		held += rzNodeOverhead + n.slices() + cap(n.buf)
		if n.dead {
			return fmt.Errorf("dead node in the tree")
		}
		for _, s := range n.snaps {
			snaps++
			held += rzSnapOverhead + cap(s.data)
			if s.off <= n.start || s.off > n.end() {
				return fmt.Errorf("snapshot at %d in node [%d,%d]", s.off, n.start, n.end())
			}
			if vars[s.v]++; vars[s.v] == 1 {
				held += rzVariantOverhead + cap(s.v.data)
			}
		}
		if len(n.firsts) != len(n.kids) {
			return fmt.Errorf("%d first bytes for %d kids", len(n.firsts), len(n.kids))
		}
		for i, k := range n.kids {
			if k.parent != n || k.start != n.end() {
				return fmt.Errorf("kid at %d of node [%d,%d]", k.start, n.start, n.end())
			}
			if n.firsts[i] != k.seg[0] {
				return fmt.Errorf("kid %d starts with %q, noted %q", i, k.seg[0], n.firsts[i])
			}
			if err := visit(k); err != nil {
				return err
			}
		}
		return nil
	}
	for _, t := range r.roots {
		if err := visit(t.n); err != nil {
			return err
		}
	}
	for v, n := range vars {
		if v.refs != n {
			return fmt.Errorf("variant used by %d snapshots counts %d", n, v.refs)
		}
	}
	for _, l := range r.free.bufs {
		for _, b := range l {
			free += cap(b)
		}
	}
	for _, n := range r.free.nodes {
		free += rzNodeOverhead + n.slices()
	}
	free += rzSnapOverhead*len(r.free.snaps) + rzVariantOverhead*len(r.free.variants)
	switch {
	case free != r.free.bytes:
		return fmt.Errorf("free lists hold %d bytes, counted %d", free, r.free.bytes)
	case held+free != r.bytes:
		return fmt.Errorf("holds %d bytes, counted %d", held+free, r.bytes)
	case r.bytes > r.max:
		return fmt.Errorf("holds %d bytes, budget %d", r.bytes, r.max)
	case nodes != r.nodes || snaps != r.snaps:
		return fmt.Errorf("%d nodes and %d snapshots, counted %d and %d", nodes, snaps, r.nodes, r.snaps)
	}
	return nil
}
