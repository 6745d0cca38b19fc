package canon

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"math/bits"
	"slices"
)

// commonPrefix is the length of the longest common prefix of a and b, at
// memory speed: whole pages by bytes.Equal, then words.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	const page = 4096
	for i+page <= n && bytes.Equal(a[i:i+page], b[i:i+page]) {
		i += page
	}
	for i+8 <= n {
		if x := binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:]); x != 0 {
			return i + bits.TrailingZeros64(x)/8
		}
		i += 8
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// rzPath is where a body's bytes led in a tree: the nodes from the root,
// their epochs when walked, and how many bytes of the body matched.
type rzPath struct {
	nodes   []*rzNode
	epochs  []uint32
	matched int
}

func (p *rzPath) valid() bool {
	for i, n := range p.nodes {
		if n.dead || n.epoch != p.epochs[i] {
			return false
		}
	}
	return true
}

// walk follows body from n down the tree (read or write lock held).
func walk(n *rzNode, body []byte, p *rzPath) {
	p.nodes = append(p.nodes[:0], n)
	p.epochs = append(p.epochs[:0], n.epoch)
	pos := 0
	for pos < len(body) {
		k := n.kid(body[pos])
		if k == nil {
			break
		}
		m := commonPrefix(k.seg, body[pos:])
		p.nodes = append(p.nodes, k)
		p.epochs = append(p.epochs, k.epoch)
		pos += m
		if m < len(k.seg) {
			break
		}
		n = k
	}
	p.matched = pos
}

// root returns the tree of api and tag, nil if there is none yet.
func (r *Resumer) root(api API, tag uint64) *rzNode {
	for _, t := range r.roots {
		if t.api == api && t.tag == tag {
			return t.n
		}
	}
	return nil
}

// lookup finds the deepest snapshot whose raw prefix and variant body
// matches: the snapshot and the offset of the body's prompt array's
// closing bracket. It also leaves the body's path in p for record.
func (r *Resumer) lookup(api API, tag uint64, body []byte, p *rzPath) (*rzSnap, int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p.nodes, p.epochs, p.matched = p.nodes[:0], p.epochs[:0], 0
	root := r.root(api, tag)
	if root == nil {
		return nil, 0
	}
	walk(root, body, p)
	if len(p.nodes) > 1 {
		p.nodes[len(p.nodes)-1].used.Store(r.clock.Add(1))
	}
	// One variant serves a whole conversation: check each only once.
	var tried *rzVariant
	for i := len(p.nodes) - 1; i >= 0; i-- {
		ss := p.nodes[i].snaps
		for j := len(ss) - 1; j >= 0; j-- {
			s := ss[j]
			if s.off > p.matched || s.v == tried {
				continue
			}
			e := len(body) - len(s.v.post)
			if e >= s.off && bytes.Equal(body[e:], s.v.post) {
				return s, e
			}
			tried = s.v
		}
	}
	return nil, 0
}

// rzCapture is a boundary met while canonicalising, to be recorded.
type rzCapture struct {
	off, blocks int
	pOff, pLen  int // its partial block in rzScratch.parts
	followup    bool
	sessionSet  bool
	messages    int
	session     uint64
	firstHash   uint64
	total       int
}

// record remembers body's bytes up to its last captured boundary and the
// captured snapshots, after prev (the snapshot the run resumed from, nil
// if it ran cold). v is the body's variant (nil: make it from post and
// info). chain is the sink's final chain.
func (r *Resumer) record(api API, tag uint64, body []byte, p *rzPath, caps []rzCapture, parts []byte,
	chain []uint64, prev *rzSnap, v *rzVariant, post []byte, info *Info) {
	if len(caps) == 0 {
		return
	}
	end := caps[len(caps)-1].off
	if end > r.max/4 {
		return // one body must not wipe out everything else
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	root := r.root(api, tag)
	if root == nil {
		root = &rzNode{}
		r.roots = append(r.roots, &rzRoot{api: api, tag: tag, n: root})
		r.nodes++
		r.bytes += rzNodeOverhead
	}
	if len(p.nodes) == 0 || p.nodes[0] != root || !p.valid() {
		walk(root, body, p)
	}
	last := p.nodes[len(p.nodes)-1]
	if p.matched < end {
		if p.matched < last.end() {
			r.split(last, p.matched-last.start)
		}
		if len(last.kids) == 0 && last != root {
			// The common case, a conversation's next turn: grow its leaf.
			old := cap(last.seg)
			if add := end - p.matched; len(last.seg)+add > cap(last.seg) {
				// Grow by doubling (amortised: a conversation's turns add
				// little each), into a recycled buffer.
				b := append(r.newBuf(max(2*len(last.seg), len(last.seg)+add)), last.seg...)
				if last.own {
					r.putBuf(last.seg)
				}
				last.seg, last.own = b, true
			}
			last.seg = append(last.seg, body[p.matched:end]...)
			r.bytes += cap(last.seg) - old
		} else {
			leaf := &rzNode{seg: append(r.newBuf(end-p.matched), body[p.matched:end]...), own: true, start: p.matched, parent: last}
			last.kids = append(last.kids, leaf)
			p.nodes = append(p.nodes, leaf)
			p.epochs = append(p.epochs, 0)
			r.nodes++
			r.bytes += rzNodeOverhead + cap(leaf.seg)
		}
		p.matched = end
	}
	if v == nil {
		v = &rzVariant{post: bytes.Clone(post), model: bytes.Clone(info.Model), prevID: bytes.Clone(info.PreviousResponseID),
			priority: bytes.Clone(info.Priority), cacheKey: info.CacheKey, userKey: info.UserKey}
		r.bytes += v.size()
	}
	// One allocation each for the snapshots, their hashes and their
	// partial blocks, however many boundaries the body had.
	nd, np := 0, 0
	lo := 0
	if prev != nil {
		lo = prev.blocks
	}
	for i := range caps {
		nd += caps[i].blocks - lo
		lo = caps[i].blocks
		np += caps[i].pLen
	}
	batch := make([]rzSnap, len(caps))
	deltas := make([]uint64, 0, max(nd, 0))
	partials := make([]byte, 0, np)
	ni := 0
	for i := range caps {
		c := &caps[i]
		for ni < len(p.nodes) && p.nodes[ni].end() < c.off {
			ni++
		}
		if ni == len(p.nodes) {
			break // cannot happen: the last capture ends the path
		}
		n := p.nodes[ni]
		if c.off <= n.start {
			continue // at the root's start: nothing to resume
		}
		j, _ := slices.BinarySearchFunc(n.snaps, c.off, func(s *rzSnap, off int) int { return cmp.Compare(s.off, off) })
		for j < len(n.snaps) && n.snaps[j].off == c.off && n.snaps[j].v != v {
			j++
		}
		if j < len(n.snaps) && n.snaps[j].off == c.off {
			prev = n.snaps[j] // remembered already: the same state
			continue
		}
		lo := 0
		if prev != nil {
			lo = prev.blocks
		}
		d0, p0 := len(deltas), len(partials)
		deltas = append(deltas, chain[lo:c.blocks]...)
		partials = append(partials, parts[c.pOff:c.pOff+c.pLen]...)
		s := &batch[i]
		*s = rzSnap{off: c.off, prev: prev, blocks: c.blocks, delta: deltas[d0:len(deltas):len(deltas)],
			partial: partials[p0:len(partials):len(partials)], v: v,
			followup: c.followup, sessionSet: c.sessionSet, messages: c.messages, session: c.session,
			firstHash: c.firstHash, total: c.total}
		n.snaps = slices.Insert(n.snaps, j, s)
		v.refs++
		r.snaps++
		r.bytes += s.size()
		prev = s
	}
	if v.refs == 0 {
		r.bytes -= v.size() // every capture was remembered already
	}
	p.nodes[len(p.nodes)-1].used.Store(r.clock.Add(1))
	if r.bytes > r.max {
		r.evict()
	}
}

// split cuts n after m bytes: n keeps the first m and its snapshots up to
// there, a new child the rest (under the write lock).
func (r *Resumer) split(n *rzNode, m int) {
	lower := &rzNode{seg: n.seg[m:], start: n.start + m, parent: n, kids: n.kids}
	lower.used.Store(n.used.Load())
	for _, k := range lower.kids {
		k.parent = lower
	}
	cut := len(n.snaps)
	for cut > 0 && n.snaps[cut-1].off > lower.start {
		cut--
	}
	lower.snaps = slices.Clone(n.snaps[cut:])
	n.snaps = n.snaps[:cut:cut]
	n.seg = n.seg[:m:m] // never appended to in place: lower owns the rest
	n.own = false       // nor recycled: the buffer is shared
	n.kids = []*rzNode{lower}
	n.epoch++
	r.nodes++
	r.bytes += rzNodeOverhead
}

// evict drops the least recently used leaves until a sixteenth of the
// budget is free (under the write lock): few enough that their buffers
// fit the free lists, which new bodies then reuse.
func (r *Resumer) evict() {
	target := r.max - r.max/16
	for r.bytes > target {
		r.leaves = r.leaves[:0]
		for _, t := range r.roots {
			r.leaves = appendLeaves(r.leaves, t.n)
		}
		if len(r.leaves) == 0 {
			break
		}
		slices.SortFunc(r.leaves, func(a, b *rzNode) int { return cmp.Compare(a.used.Load(), b.used.Load()) })
		for _, l := range r.leaves {
			if r.bytes <= target {
				break
			}
			r.drop(l)
		}
	}
	clear(r.leaves)
	r.leaves = r.leaves[:0]
}

func appendLeaves(dst []*rzNode, n *rzNode) []*rzNode {
	for _, k := range n.kids {
		if len(k.kids) == 0 {
			dst = append(dst, k)
		} else {
			dst = appendLeaves(dst, k)
		}
	}
	return dst
}

// drop removes leaf l and its snapshots (under the write lock). Nothing
// outside l points at its snapshots: a snapshot's prev is always on the
// path to it.
func (r *Resumer) drop(l *rzNode) {
	p := l.parent
	if i := slices.Index(p.kids, l); i >= 0 {
		p.kids = slices.Delete(p.kids, i, i+1)
	}
	for _, s := range l.snaps {
		r.bytes -= s.size()
		r.snaps--
		if s.v.refs--; s.v.refs == 0 {
			r.bytes -= s.v.size()
		}
	}
	r.bytes -= rzNodeOverhead + cap(l.seg)
	if l.own {
		r.putBuf(l.seg)
	}
	l.seg = nil
	r.nodes--
	l.dead = true
	l.epoch++
	r.evictions.Add(1)
}
