package epp

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// envoyHeaders is Headers over the header map Envoy sends. Envoy puts a
// value in raw_value (bytes) and leaves value empty; older builds and
// some control planes use value, so both are read.
type envoyHeaders []*corev3.HeaderValue

func headersOf(m *corev3.HeaderMap) envoyHeaders {
	if m == nil {
		return nil
	}
	return m.GetHeaders()
}

func (h envoyHeaders) Len() int { return len(h) }

func (h envoyHeaders) At(i int) (name, value []byte) {
	v := h[i]
	if len(v.GetRawValue()) > 0 {
		return []byte(v.GetKey()), v.GetRawValue()
	}
	return []byte(v.GetKey()), []byte(v.GetValue())
}

// get returns the first value of a header named name (lower case), ""
// when it is absent.
func (h envoyHeaders) get(name string) string {
	for _, v := range h {
		if strings.EqualFold(v.GetKey(), name) {
			if len(v.GetRawValue()) > 0 {
				return string(v.GetRawValue())
			}
			return v.GetValue()
		}
	}
	return ""
}
