package kdn

import (
	"bytes"
	"testing"
)

// FuzzDecode checks, for every model, that arbitrary bytes never panic the
// decoder and that accepted input has a stable canonical form:
// decode → encode → decode → encode gives the same bytes.
func FuzzDecode(f *testing.F) {
	names := ModelNames()
	index := map[string]uint{}
	for i, n := range names {
		index[n] = uint(i)
	}
	for _, c := range loadVectors(f) {
		f.Add(index[c.Model], c.Input(f))
	}
	f.Fuzz(func(t *testing.T, model uint, data []byte) {
		name := names[model%uint(len(names))]
		m, err := Decode(name, data)
		if err != nil {
			if _, ok := err.(*ValidationError); !ok {
				t.Fatalf("error is %T, want *ValidationError", err)
			}
			return
		}
		out, err := Encode(m)
		if err != nil {
			t.Fatalf("%s: accepted value does not encode: %v", name, err)
		}
		m2, err := Decode(name, out)
		if err != nil {
			t.Fatalf("%s: canonical form rejected: %v\n%s", name, err, out)
		}
		out2, err := Encode(m2)
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("%s: unstable canonical form\n%s\n%s", name, out, out2)
		}
	})
}
