package epp

import (
	"bytes"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// envoyHeaders is Headers over the header map Envoy sends, made once per
// message: the lifecycle looks fields up by walking them, and a name
// turned into bytes at every look-up cost an allocation each time. Envoy
// puts a value in raw_value (bytes) and leaves value empty; older builds
// and some control planes use value, so both are read.
type envoyHeaders []headerField

type headerField struct{ name, value []byte }

func headersOf(m *corev3.HeaderMap) envoyHeaders {
	hs := m.GetHeaders()
	if len(hs) == 0 {
		return nil
	}
	size := 0
	for _, v := range hs {
		size += len(v.GetKey())
	}
	// The names in one allocation; raw values as Envoy sent them.
	names := make([]byte, 0, size)
	out := make(envoyHeaders, len(hs))
	for i, v := range hs {
		start := len(names)
		names = append(names, v.GetKey()...)
		out[i].name = names[start:len(names):len(names)]
		if raw := v.GetRawValue(); len(raw) > 0 {
			out[i].value = raw
		} else {
			out[i].value = []byte(v.GetValue())
		}
	}
	return out
}

func (h envoyHeaders) Len() int { return len(h) }

func (h envoyHeaders) At(i int) (name, value []byte) { return h[i].name, h[i].value }

// get returns the first value of a header named name (lower case), ""
// when it is absent.
func (h envoyHeaders) get(name string) string { return string(h.value(name)) }

// value is the first value of a header named name (lower case), nil
// when it is absent; it aliases the headers.
func (h envoyHeaders) value(name string) []byte {
	for _, f := range h {
		if len(f.name) == len(name) && bytes.EqualFold(f.name, []byte(name)) {
			return f.value
		}
	}
	return nil
}

// headerArena is where a stream's header maps decoded by hand go: the
// request's fields, then the response's after them, names and values in
// buf. The lifecycle keeps the request's headers until End; the arena
// goes back to its pool when the stream has ended, so that once the pool
// is warm a stream decodes its headers without allocating.
type headerArena struct {
	buf    []byte
	fields envoyHeaders
}

// headerArenas pools the arenas. A nil pool makes new ones.
type headerArenas struct{ pool sync.Pool }

// maxArenaBytes: an arena whose buffer grew past this (a client's
// outsized headers) is not kept.
const maxArenaBytes = 64 << 10

func (p *headerArenas) get() *headerArena {
	if p != nil {
		if a, _ := p.pool.Get().(*headerArena); a != nil {
			return a
		}
	}
	return &headerArena{}
}

// put keeps a for another stream; nothing may read the headers decoded
// into it after.
func (p *headerArenas) put(a *headerArena) {
	if p == nil || cap(a.buf) > maxArenaBytes {
		return
	}
	clear(a.fields[:cap(a.fields)]) // no stale field keeps an old buffer alive
	a.buf, a.fields = a.buf[:0], a.fields[:0]
	p.pool.Put(a)
}
