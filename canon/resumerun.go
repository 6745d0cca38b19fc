package canon

import (
	"github.com/valyala/fastjson"
)

// rzScratch is a request's resuming state, kept in the pooled state.
type rzScratch struct {
	on      bool // capturing boundaries for the Resumer
	every   int  // the Resumer's snapshot distance
	rs      ResumableSink
	base    int // address of body offset 0 in the parser's copy
	body    []byte
	end     int // offset of the prompt array's closing bracket
	last    int // st.total at the last capture
	caps    []rzCapture
	parts   []byte
	path    rzPath
	at      rzLine // the line state a resumed run starts from
	scratch []byte
}

// snapEvery is the CBR distance between remembered boundaries besides a
// body's last one: a follow-up usually resumes from its history's last
// boundary, the others serve forks (a retried or edited turn) and new
// conversations that share a long start, and each costs a block's bytes.
const snapEvery = 8 << 10

// maxKeptScratch bounds the tail copy a pooled state keeps.
const maxKeptScratch = 1 << 20

// resumable reports whether api's bodies have message boundaries.
func resumable(api API) bool { return api != Completions }

// canonicalizeResuming is Canonicalize with c.resume and a resumable sink.
func (c *Canonicalizer) canonicalizeResuming(st *state, api API, body []byte, rs ResumableSink, info *Info) error {
	r := c.resume
	tag := rs.ResumeTag()
	z := &st.rz
	z.caps, z.parts = z.caps[:0], z.parts[:0]
	z.body, z.rs, z.every = body, rs, r.every
	defer func() {
		z.on, z.body, z.rs = false, nil, nil
		clear(z.path.nodes) // a pooled state must not keep dropped nodes alive
		if cap(z.scratch) > maxKeptScratch {
			z.scratch = nil
		}
	}()
	c.begin(st, api, rs, info)
	s, gen, e := r.lookup(api, tag, body, &z.path, rs, info, &z.at)
	if s != nil {
		if c.resumeRun(st, api, body, info, e) {
			info.PromptEnd = e
			r.hits.Add(1)
			r.skipped.Add(uint64(z.at.off))
			r.record(api, tag, body, &z.path, z.caps, z.parts, rs.Blocks(), s, gen, true, body[e:], info)
			return nil
		}
		rs.Reset()
		z.caps, z.parts = z.caps[:0], z.parts[:0]
	}
	r.misses.Add(1)
	z.on = true
	err := c.run(st, api, body, rs, info)
	if err != nil || !z.on {
		return err
	}
	info.PromptEnd = z.end
	r.record(api, tag, body, &z.path, z.caps, z.parts, rs.Blocks(), s, gen, false, body[z.end:], info)
	return nil
}

// resumeRun canonicalises body from the line state z.at, which lookup
// restored with the sink and the top-level Info, given that body's bytes
// from e on equal its snapshot's variant's. false: the tail is not what a
// cold run would accept as it stands (run cold).
func (c *Canonicalizer) resumeRun(st *state, api API, body []byte, info *Info, e int) bool {
	z := &st.rz
	at := &z.at
	// The tail as an array whose first element is a known object: parsing
	// it checks that the body's new elements close the array at e, and the
	// known key's address gives the offsets of the others.
	const head = `[{"k":0}`
	z.scratch = append(append(z.scratch[:0], head...), body[at.off:e+1]...)
	val, err := st.p.ParseBytes(z.scratch)
	if err != nil {
		return false
	}
	arr := val.GetArray()
	if len(arr) == 0 || arr[0].GetObject() == nil {
		return false
	}
	z.base = addr(firstKey(arr[0].GetObject())) - (at.off - len(head) + 3)
	elems := arr[1:]
	st.roles = st.roles[:0]
	if api == Chat || api == Messages {
		for _, m := range elems {
			if m.Type() != fastjson.TypeObject {
				return false
			}
			role := lastMember(m.GetObject(), "role")
			if role == nil || !st.isString(role) {
				return false
			}
			st.roles = append(st.roles, role)
		}
	}
	st.total = at.total
	z.last = at.total
	st.sessionSet, st.firstHash = at.sessionSet, at.firstHash
	z.end, z.on = e, true
	if err := st.lines(elems, at.messages, info, api); err != nil {
		return false
	}
	st.flush()
	info.CBRLen = st.total
	return true
}

// rzTop prepares a cold run's captures from the top-level members in body
// order: the parser's base address and the prompt array's closing
// bracket. Capturing stays off when either cannot be vouched for.
func (st *state) rzTop(raw []member, promptKey string) {
	z := &st.rz
	body := z.body
	z.on = false
	i := 0
	for i < len(body) && isSpace(body[i]) {
		i++
	}
	if i >= len(body) || body[i] != '{' {
		return
	}
	for i++; i < len(body) && isSpace(body[i]); i++ {
	}
	if i >= len(body) || body[i] != '"' || len(raw) == 0 {
		return
	}
	z.base = addr(raw[0].key) - (i + 1)
	if st.keyOffset(body, raw[0].key) != i+1 {
		return
	}
	p := -1
	for j := range raw {
		if string(raw[j].key) == promptKey {
			if p >= 0 {
				// A body naming its prompt twice is not remembered: the
				// array found again from its bytes (Info.PromptEnd) must
				// be the only prompt member, so that nothing between two
				// of them is skipped by a reader jumping past it.
				return
			}
			p = j
		}
	}
	if p < 0 {
		return
	}
	var e int
	if p+1 < len(raw) {
		q := st.keyOffset(body, raw[p+1].key)
		if q < 1 || body[q-1] != '"' {
			return
		}
		if e = back(body, q-2, ','); e < 0 {
			return
		}
		e = back(body, e-1, ']')
	} else {
		e = back(body, len(body)-1, '}')
		if e < 0 {
			return
		}
		e = back(body, e-1, ']')
	}
	if e < 0 {
		return
	}
	z.end, z.on, z.last = e, true, 0
}

// capture remembers the state after the line of the element that ends at
// off (flushing the output buffer into the sink first).
func (st *state) capture(off int, info *Info) {
	z := &st.rz
	st.flush()
	p := z.rs.Partial()
	z.caps = append(z.caps, rzCapture{rzLine: rzLine{off: off, blocks: len(z.rs.Blocks()),
		followup: info.Followup, sessionSet: st.sessionSet, messages: info.Messages, session: info.Session,
		firstHash: st.firstHash, total: st.total}, pOff: len(z.parts), pLen: len(p)})
	z.parts = append(z.parts, p...)
	z.last = st.total
}

// boundaryBefore captures the boundary before element m (not the first
// of the array) if it is due and can be found.
func (st *state) boundaryBefore(m *fastjson.Value, info *Info) {
	z := &st.rz
	if st.total+st.n-z.last < z.every {
		return
	}
	o := m.GetObject()
	if o == nil {
		return
	}
	if q := st.keyOffset(z.body, firstKey(o)); q > 0 {
		if off := endBefore(z.body, q); off > 0 {
			st.capture(off, info)
		}
	}
}

// boundaryLast captures the boundary after the array's last element.
func (st *state) boundaryLast(info *Info) {
	if off := endBeforeClose(st.rz.body, st.rz.end); off > 0 {
		st.capture(off, info)
	}
}
