package cluster

import "testing"

// FuzzDecodeWire: messages from the bus are untrusted bytes; no input may
// panic a decoder, and whatever decodes stays within its own length.
func FuzzDecodeWire(f *testing.F) {
	lb := newLocBatch(2)
	lb.add(0, 11, 1_700_000_000_000, []uint64{1, 2, 3})
	lb.add(1, 22, 1_700_000_000_500, []uint64{4})
	h := header{}
	f.Add(lb.encode(nil, h))
	f.Add(appendLoad(nil, h, 1_700_000_000_000, 200, []loadEntry{{}}))
	f.Add(appendReset(nil, h, 7, 1_700_000_000_000))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, body, err := parseHeader(b)
		if err != nil {
			body = b
		}
		var scratch []uint64
		total := 0
		_ = decodeLocations(body, &scratch, func(_ uint64, _ int64, hashes []uint64) { total += len(hashes) })
		if total > len(body)/8 {
			t.Fatalf("%d hashes decoded from %d bytes", total, len(body))
		}
		_, _, _, _ = decodeLoad(body, nil)
		_, _, _ = decodeReset(body)
	})
}
