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
	epochs  []uint64
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
// matches, and restores it while the read lock keeps it: the sink's
// state into rs, the top-level Info into info (begun), its line state
// into at. It returns the snapshot, its gen (for record) and the offset
// of the body's prompt array's closing bracket, and leaves the body's
// path in p for record.
func (r *Resumer) lookup(api API, tag uint64, body []byte, p *rzPath, rs ResumableSink, info *Info, at *rzLine) (*rzSnap, uint64, int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p.nodes, p.epochs, p.matched = p.nodes[:0], p.epochs[:0], 0
	root := r.root(api, tag)
	if root == nil {
		return nil, 0, 0
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
				restore(s, rs, info, at)
				return s, s.gen, e
			}
			tried = s.v
		}
	}
	return nil, 0, 0
}

// restore copies snapshot s out (read lock held).
func restore(s *rzSnap, rs ResumableSink, info *Info, at *rzLine) {
	chain := rs.Restore(s.blocks, s.partial())
	for x := s; x != nil; x = x.prev {
		lo := 0
		if x.prev != nil {
			lo = x.prev.blocks
		}
		x.deltaInto(chain[lo:x.blocks])
	}
	*at = s.rzLine
	v := s.v
	info.Followup = s.followup
	info.Model = append(info.Model, v.model...)
	info.PreviousResponseID = append(info.PreviousResponseID, v.prevID...)
	info.Priority = append(info.Priority, v.priority...)
	info.CacheKey, info.UserKey = v.cacheKey, v.userKey
	info.Messages = s.messages
	if s.sessionSet {
		info.Session = s.session
	}
}

// rzCapture is a boundary met while canonicalising, to be recorded, with
// its partial block at parts[pOff:pOff+pLen] in rzScratch.
type rzCapture struct {
	rzLine
	pOff, pLen int
}

// record remembers body's bytes up to its last captured boundary and the
// captured snapshots. from is the snapshot lookup found (nil: none) and
// gen its gen then; resumed says whether the run resumed from it (the
// captures follow it) or ran cold (from's variant may still serve).
// post is the body's bytes from its prompt array's closing bracket, info
// what the run found, chain the sink's final chain.
func (r *Resumer) record(api API, tag uint64, body []byte, p *rzPath, caps []rzCapture, parts []byte,
	chain []uint64, from *rzSnap, gen uint64, resumed bool, post []byte, info *Info) {
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
		root = r.newNode()
		r.roots = append(r.roots, &rzRoot{api: api, tag: tag, n: root})
	}
	if len(p.nodes) == 0 || p.nodes[0] != root || !p.valid() {
		walk(root, body, p)
	}
	// The most recently used: making room evicts the path's end last.
	p.nodes[len(p.nodes)-1].used.Store(r.clock.Add(1))
	var d rzDemand
	for {
		if from != nil && from.gen != gen {
			if resumed {
				return // dropped since lookup: the captures cannot follow it
			}
			from = nil
		}
		d = r.demand(p, root, end, caps, from, resumed, post, info)
		fits, evicted := r.room(&d)
		if fits {
			break
		}
		if !evicted {
			return // nothing left to make room with
		}
		if !p.valid() {
			walk(root, body, p) // eviction reached the path: plan again
		}
	}
	var prev *rzSnap
	var v *rzVariant
	switch {
	case from != nil && resumed:
		prev, v = from, from.v
	case from != nil && bytes.Equal(post, from.v.post):
		v = from.v
	default:
		v = r.newVariant(post, info)
	}
	r.grow(p, root, body, end)
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
		s := r.newSnap(c.pLen + 8*(c.blocks-lo))
		s.rzLine, s.prev, s.v, s.plen = c.rzLine, prev, v, c.pLen
		s.data = append(s.data, parts[c.pOff:c.pOff+c.pLen]...)
		for _, h := range chain[lo:c.blocks] {
			s.data = binary.LittleEndian.AppendUint64(s.data, h)
		}
		before := n.slices()
		n.snaps = slices.Insert(n.snaps, j, s)
		r.bytes += n.slices() - before
		v.refs++
		prev = s
	}
	if v.refs == 0 {
		r.putVariant(v) // every capture was remembered already
	}
	p.nodes[len(p.nodes)-1].used.Store(r.clock.Add(1))
	r.trim()
}

// demand is what recording body up to end along p takes: the buffers of
// grow, a variant unless from's serves, and at most a snapshot a
// capture.
func (r *Resumer) demand(p *rzPath, root *rzNode, end int, caps []rzCapture, from *rzSnap, resumed bool,
	post []byte, info *Info) rzDemand {
	var d rzDemand
	last := p.nodes[len(p.nodes)-1]
	if p.matched < end {
		if m := p.matched - last.start; p.matched < last.end() {
			d.nodes++
			d.buf(min(m, len(last.seg)-m))
			d.nodes++
			d.buf(end - p.matched)
		} else if len(last.kids) == 0 && last != root {
			if len(last.seg)+end-p.matched > cap(last.seg) {
				d.buf(grownSize(len(last.seg), end-p.matched))
			}
		} else {
			d.nodes++
			d.buf(end - p.matched)
		}
	}
	if from == nil || (!resumed && !bytes.Equal(post, from.v.post)) {
		d.variants++
		d.buf(len(post) + len(info.Model) + len(info.PreviousResponseID) + len(info.Priority))
	}
	lo := 0
	if from != nil && resumed {
		lo = from.blocks
	}
	for i := range caps {
		d.snaps++
		d.buf(caps[i].pLen + 8*(caps[i].blocks-lo))
		lo = caps[i].blocks
	}
	return d
}

// room makes d fit in the budget with what the Resumer holds (under the
// write lock). Unless the free lists hold a batch's worth already, the
// least recently used leaves go first: what they free is what new records
// take. Then free buffers and structures d does not need, then more
// leaves. Unless d fits, it reports whether it evicted anything: then d
// must be planned again (the path may have changed).
func (r *Resumer) room(d *rzDemand) (fits, evicted bool) {
	short := r.short(d)
	if r.bytes+short <= r.max {
		return true, false
	}
	if r.free.bytes < r.max/16 {
		if r.evict(r.bytes - r.free.bytes - r.max/16) {
			return false, true
		}
	}
	if r.release(r.max-short, d) && r.bytes+r.short(d) <= r.max {
		return true, false
	}
	// What is free now is d's: the tree must shrink by the rest.
	return false, r.evict(r.max - r.max/16 - r.free.bytes - r.short(d))
}

// trim releases free parts, then evicts, until the Resumer holds at most
// its budget (under the write lock): record's demand bounds what it
// takes, but not the growth of the slices of snapshots.
func (r *Resumer) trim() {
	var none rzDemand
	for r.bytes > r.max {
		if !r.release(r.max, &none) && !r.evict(r.max-r.max/16) {
			return
		}
	}
}

// grow makes the tree hold body up to end along p, which it extends
// (under the write lock).
func (r *Resumer) grow(p *rzPath, root *rzNode, body []byte, end int) {
	if p.matched >= end {
		return
	}
	last := p.nodes[len(p.nodes)-1]
	if p.matched < last.end() {
		r.split(last, p.matched-last.start)
	}
	if len(last.kids) == 0 && last != root {
		// The common case, a conversation's next turn: grow its leaf, in
		// place while its buffer has room.
		if len(last.seg)+end-p.matched > cap(last.seg) {
			b := append(r.newBuf(grownSize(len(last.seg), end-p.matched)), last.seg...)
			r.putBuf(last.buf)
			last.buf, last.seg = b, b
		}
		last.seg = append(last.seg, body[p.matched:end]...)
	} else {
		leaf := r.newNode()
		leaf.buf = r.newBuf(end - p.matched)
		leaf.seg = append(leaf.buf, body[p.matched:end]...)
		leaf.start, leaf.parent = p.matched, last
		before := last.slices()
		last.kids = append(last.kids, leaf)
		last.firsts = append(last.firsts, leaf.seg[0])
		r.bytes += last.slices() - before
		p.nodes = append(p.nodes, leaf)
		p.epochs = append(p.epochs, leaf.epoch)
	}
	p.matched = end
}

// grownSize is the buffer a leaf of n bytes growing by add moves to: half
// as large again at least, so that a conversation's turns, each adding
// little, copy its history a few times in all.
func grownSize(n, add int) int { return n + max(add, n/2) }

// split cuts n after m bytes: n keeps the first m and its snapshots up to
// there, a new child the rest (under the write lock). The smaller part
// is copied into a buffer of its own, so that each node owns its buffer
// whole and dropping it frees it; the copy costs at most what recording
// the body that caused the split did.
func (r *Resumer) split(n *rzNode, m int) {
	lower := r.newNode()
	lower.start, lower.parent = n.start+m, n
	lower.used.Store(n.used.Load())
	if m <= len(n.seg)-m {
		b := append(r.newBuf(m), n.seg[:m]...)
		lower.buf, lower.seg = n.buf, n.seg[m:]
		n.buf, n.seg = b, b
	} else {
		lower.buf = r.newBuf(len(n.seg) - m)
		lower.seg = append(lower.buf, n.seg[m:]...)
		n.seg = n.seg[:m] // its buffer's rest may be grown into later
	}
	before := n.slices() + lower.slices()
	lower.kids, n.kids = n.kids, lower.kids
	lower.firsts, n.firsts = n.firsts, lower.firsts
	for _, k := range lower.kids {
		k.parent = lower
	}
	n.kids = append(n.kids[:0], lower)
	n.firsts = append(n.firsts[:0], lower.seg[0])
	cut := len(n.snaps)
	for cut > 0 && n.snaps[cut-1].off > lower.start {
		cut--
	}
	lower.snaps = append(lower.snaps[:0], n.snaps[cut:]...)
	clear(n.snaps[cut:])
	n.snaps = n.snaps[:cut]
	r.bytes += n.slices() + lower.slices() - before
	n.epoch++
}

// evict drops the least recently used leaves until the tree holds at
// most target bytes (under the write lock), a sixteenth of the budget
// below it when called for room, so that eviction's sorting is paid once
// for many records, which reuse what it freed. It reports whether it
// dropped any.
func (r *Resumer) evict(target int) bool {
	dropped := false
	for r.bytes-r.free.bytes > target {
		r.leaves = r.leaves[:0]
		for _, t := range r.roots {
			r.leaves = appendLeaves(r.leaves, t.n)
		}
		if len(r.leaves) == 0 {
			break
		}
		// By the stamps read once: comparing through the nodes would
		// miss the cache at every step.
		slices.SortFunc(r.leaves, func(a, b rzLeaf) int { return cmp.Compare(a.used, b.used) })
		for _, l := range r.leaves {
			if r.bytes-r.free.bytes <= target {
				break
			}
			r.drop(l.n)
			dropped = true
		}
	}
	clear(r.leaves)
	r.leaves = r.leaves[:0]
	return dropped
}

// rzLeaf is a leaf and its recency stamp, for eviction's sort.
type rzLeaf struct {
	used uint64
	n    *rzNode
}

func appendLeaves(dst []rzLeaf, n *rzNode) []rzLeaf {
	for _, k := range n.kids {
		if len(k.kids) == 0 {
			dst = append(dst, rzLeaf{k.used.Load(), k})
		} else {
			dst = appendLeaves(dst, k)
		}
	}
	return dst
}

// drop removes leaf l and its snapshots (under the write lock), to the
// free lists. Nothing outside l points at its snapshots: a snapshot's
// prev is always on the path to it.
func (r *Resumer) drop(l *rzNode) {
	p := l.parent
	if i := slices.Index(p.kids, l); i >= 0 {
		p.kids = slices.Delete(p.kids, i, i+1)
		p.firsts = slices.Delete(p.firsts, i, i+1)
	}
	for _, s := range l.snaps {
		r.putSnap(s)
	}
	clear(l.snaps)
	r.putBuf(l.buf)
	l.buf, l.seg, l.parent = nil, nil, nil
	l.dead = true
	l.epoch++
	r.putNode(l)
	r.evictions.Add(1)
}

// likelySample is how many bytes at each end of a remembered run Likely
// compares.
const likelySample = 64

// sampledPrefix estimates where b leaves a (their first likelySample bytes
// equal, their last at len(a) not): the largest offset whose sample is
// equal, found by bisection, so about a sample per doubling of len(a).
func sampledPrefix(a, b []byte) int {
	lo, hi := 0, (len(a)-1)/likelySample // samples [0,lo] equal, hi's not
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		o := mid * likelySample
		if bytes.Equal(a[o:o+likelySample], b[o:o+likelySample]) {
			lo = mid
		} else {
			hi = mid
		}
	}
	o := lo * likelySample
	e := min(o+2*likelySample, len(a), len(b))
	return o + commonPrefix(a[o:e], b[o:e])
}

// Likely estimates, without comparing every byte, how much of body a
// lookup would find remembered: it follows the tree comparing each run's
// first and last bytes only. It decides where to plan a large body (a body
// resumed from most of its length is planned in microseconds), never what
// the plan is: a body that differs inside a run it took as equal is only
// planned where a cold one would have been better.
func (r *Resumer) Likely(api API, tag uint64, body []byte) int {
	if r == nil || !resumable(api) {
		return 0
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := r.root(api, tag)
	if n == nil {
		return 0
	}
	pos := 0
	for pos < len(body) {
		k := n.kid(body[pos])
		if k == nil {
			break
		}
		rest := body[pos:]
		seg := k.seg[:min(len(k.seg), len(rest))] // the body may end inside the run
		s := min(likelySample, len(seg))
		if !bytes.Equal(seg[:s], rest[:s]) {
			return pos + commonPrefix(seg[:s], rest[:s])
		}
		if !bytes.Equal(seg[len(seg)-s:], rest[len(seg)-s:len(seg)]) {
			// The body leaves the run inside it: an agent's next turn
			// ends the run's last message with other bytes (the request's
			// fields after its messages). Bisect on samples for where.
			return pos + sampledPrefix(seg, rest)
		}
		if len(seg) < len(k.seg) {
			return len(body)
		}
		pos += len(k.seg)
		n = k
	}
	return pos
}
