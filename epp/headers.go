package epp

import (
	"bytes"

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
func (h envoyHeaders) get(name string) string {
	for _, f := range h {
		if len(f.name) == len(name) && bytes.EqualFold(f.name, []byte(name)) {
			return string(f.value)
		}
	}
	return ""
}
