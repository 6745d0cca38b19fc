package canon

import "math/bits"

// Raw body bytes are copied into buffers the Resumer recycles: a body
// seen for the first time is copied whole, and copying it into memory
// the process touched before costs a memmove, where fresh memory from the
// heap cost as much again in zeroing, page faults and collections as
// canonicalising the body (a tenth of it at 128 KB, a third at 1 MB).
// Snapshots and variants keep their bytes in such buffers too, and the
// nodes, snapshots and variants themselves are recycled, so that once
// the budget is reached recording takes everything from what eviction
// freed and allocates nothing.

// Buffers of 2^rzMinShift (512 B) to 16 MB are recycled, in classes a
// quarter of a power of two apart (512, 640, 768, 896, 1024, 1280, ...
// bytes): a new buffer is at most a quarter larger than asked for.
const (
	rzMinShift = 9
	rzClasses  = 4*(24-rzMinShift) + 1
)

// rzFit is how many classes larger than asked (at most twice the size) a
// free buffer may be and still serve: the classes of what new records ask
// for and of what eviction frees differ a little from batch to batch.
const rzFit = 4

// classSize is the capacity of the buffers of class c.
func classSize(c int) int { return (4 + c%4) << (c/4 + rzMinShift - 2) }

// rzFree is what dropped leaves left behind (under the write lock). All
// of it counts in Resumer.bytes; bytes is its part.
type rzFree struct {
	bufs     [rzClasses][][]byte
	nodes    []*rzNode
	snaps    []*rzSnap
	variants []*rzVariant
	bytes    int
}

// bufClass is the class of a buffer of capacity n (or -1: not kept),
// and of a request for n bytes, rounded up.
func bufClass(n int) int {
	if n <= 0 {
		return -1
	}
	if n <= 1<<rzMinShift {
		return 0
	}
	e := bits.Len(uint(n-1)) - 1 // 2^e < n <= 2^(e+1)
	c := 4*(e-rzMinShift) + (n-1)>>(e-2) - 4 + 1
	if c >= rzClasses {
		return -1
	}
	return c
}

// pop takes the last of a free list, clearing its slot so that the list
// keeps nothing alive.
func pop[T any](l *[]T) (T, bool) {
	var zero T
	n := len(*l)
	if n == 0 {
		return zero, false
	}
	x := (*l)[n-1]
	(*l)[n-1] = zero
	*l = (*l)[:n-1]
	return x, true
}

// reuse takes a blank struct of size bytes from free list l, or a new one.
func reuse[T any](r *Resumer, l *[]*T, size int) *T {
	if x, ok := pop(l); ok {
		r.free.bytes -= size
		return x
	}
	r.bytes += size
	return new(T)
}

// newBuf returns an empty buffer of capacity at least n, recycled if one
// is free (under the write lock). Its capacity is its class's, so it goes
// back to the class whole.
func (r *Resumer) newBuf(n int) []byte {
	c := bufClass(n)
	if c < 0 {
		r.bytes += n
		return make([]byte, 0, n)
	}
	for k := c; k <= min(c+rzFit, rzClasses-1); k++ {
		if b, ok := pop(&r.free.bufs[k]); ok {
			r.free.bytes -= cap(b)
			return b
		}
	}
	r.bytes += classSize(c)
	return make([]byte, 0, classSize(c))
}

// putBuf keeps b, a buffer from newBuf, for newBuf (under the write lock).
func (r *Resumer) putBuf(b []byte) {
	c := bufClass(cap(b))
	if c < 0 || cap(b) != classSize(c) {
		r.bytes -= cap(b)
		return
	}
	r.free.bufs[c] = append(r.free.bufs[c], b[:0])
	r.free.bytes += cap(b)
}

// newNode returns a blank node, recycled if one is free.
func (r *Resumer) newNode() *rzNode {
	r.nodes++
	if n, ok := pop(&r.free.nodes); ok {
		r.free.bytes -= rzNodeOverhead + n.slices()
		n.dead = false
		return n
	}
	r.bytes += rzNodeOverhead
	return &rzNode{}
}

// putNode keeps n, dropped and emptied, for newNode. It keeps its
// slices' capacity, counted with it: a leaf of a long body has many
// snapshots, and the next such leaf reuses them.
func (r *Resumer) putNode(n *rzNode) {
	r.nodes--
	n.kids, n.firsts, n.snaps = n.kids[:0], n.firsts[:0], n.snaps[:0]
	r.free.nodes = append(r.free.nodes, n)
	r.free.bytes += rzNodeOverhead + n.slices()
}

// newSnap returns a blank snapshot whose data has room for n bytes.
func (r *Resumer) newSnap(n int) *rzSnap {
	r.snaps++
	s := reuse(r, &r.free.snaps, rzSnapOverhead)
	s.data = r.newBuf(n)
	return s
}

// putSnap drops s: its buffer and the struct go to the free lists, its
// variant too if s was its last user.
func (r *Resumer) putSnap(s *rzSnap) {
	r.snaps--
	r.putBuf(s.data)
	if s.v.refs--; s.v.refs == 0 {
		r.putVariant(s.v)
	}
	gen := s.gen + 1
	*s = rzSnap{gen: gen}
	r.free.snaps = append(r.free.snaps, s)
	r.free.bytes += rzSnapOverhead
}

// newVariant returns a variant of post and info's top-level fields.
func (r *Resumer) newVariant(post []byte, info *Info) *rzVariant {
	v := reuse(r, &r.free.variants, rzVariantOverhead)
	b := r.newBuf(len(post) + len(info.Model) + len(info.PreviousResponseID) + len(info.Priority))
	b = append(b, post...)
	v.post = b[:len(post):len(post)]
	b = append(b, info.Model...)
	v.model = b[len(v.post):len(b):len(b)]
	n := len(b)
	b = append(b, info.PreviousResponseID...)
	v.prevID = b[n:len(b):len(b)]
	n = len(b)
	b = append(b, info.Priority...)
	v.priority = b[n:len(b):len(b)]
	v.data = b
	v.cacheKey, v.userKey, v.refs = info.CacheKey, info.UserKey, 0
	return v
}

func (r *Resumer) putVariant(v *rzVariant) {
	r.putBuf(v.data)
	*v = rzVariant{}
	r.free.variants = append(r.free.variants, v)
	r.free.bytes += rzVariantOverhead
}

// rzDemand is what a record will take: buffers by class, buffers too big
// for a class (bytes), and structures.
type rzDemand struct {
	bufs                   [rzClasses]int
	big                    int
	nodes, snaps, variants int
}

func (d *rzDemand) buf(n int) {
	if c := bufClass(n); c >= 0 {
		d.bufs[c]++
	} else if n > 0 {
		d.big += n
	}
}

// plan matches d's buffers with the free ones as newBuf would, smallest
// first: the bytes d needs from the heap beyond the free lists, and how
// many free buffers of each class it takes.
func (r *Resumer) plan(d *rzDemand) (short int, take [rzClasses]int) {
	short = d.big
	for c, k := range d.bufs {
		for f := c; k > 0 && f <= min(c+rzFit, rzClasses-1); f++ {
			n := min(k, len(r.free.bufs[f])-take[f])
			take[f] += n
			k -= n
		}
		short += k * classSize(c)
	}
	short += max(d.nodes-len(r.free.nodes), 0) * rzNodeOverhead
	short += max(d.snaps-len(r.free.snaps), 0) * rzSnapOverhead
	short += max(d.variants-len(r.free.variants), 0) * rzVariantOverhead
	return short, take
}

// short is how many bytes d needs from the heap beyond the free lists.
func (r *Resumer) short(d *rzDemand) int {
	s, _ := r.plan(d)
	return s
}

// release lets the collector have free buffers and structures that d
// does not ask for (the largest first) until the Resumer holds at most
// limit bytes. It reports whether it released anything.
func (r *Resumer) release(limit int, d *rzDemand) bool {
	any := false
	_, take := r.plan(d)
	for c := rzClasses - 1; c >= 0; c-- {
		any = shed(r, &r.free.bufs[c], take[c], limit, func(b []byte) int { return cap(b) }) || any
	}
	any = shed(r, &r.free.nodes, d.nodes, limit, func(n *rzNode) int { return rzNodeOverhead + n.slices() }) || any
	any = shed(r, &r.free.snaps, d.snaps, limit, func(*rzSnap) int { return rzSnapOverhead }) || any
	any = shed(r, &r.free.variants, d.variants, limit, func(*rzVariant) int { return rzVariantOverhead }) || any
	return any
}

// shed lets the collector have the last of free list l, each size bytes,
// while l holds more than keep and r more than limit. It reports whether
// it let any go.
func shed[T any](r *Resumer, l *[]T, keep, limit int, size func(T) int) bool {
	any := false
	for len(*l) > keep && r.bytes > limit {
		x, _ := pop(l)
		r.free.bytes -= size(x)
		r.bytes -= size(x)
		any = true
	}
	return any
}
