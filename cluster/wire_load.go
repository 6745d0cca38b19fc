package cluster

import "encoding/binary"

// loadEntry is one backend's in-flight counts on the sending replica.
type loadEntry struct {
	key             uint64
	active, prefill uint32
}

// appendLoad encodes a kindLoad message; ents lists only backends with load.
func appendLoad(dst []byte, h header, at, intervalMs int64, ents []loadEntry) []byte {
	h.kind = kindLoad
	dst = appendHeader(dst, h)
	dst = binary.AppendUvarint(dst, uint64(at))
	dst = binary.AppendUvarint(dst, uint64(intervalMs))
	dst = binary.AppendUvarint(dst, uint64(len(ents)))
	for _, e := range ents {
		dst = binary.LittleEndian.AppendUint64(dst, e.key)
		dst = binary.AppendUvarint(dst, uint64(e.active))
		dst = binary.AppendUvarint(dst, uint64(e.prefill))
	}
	return dst
}

// decodeLoad decodes a kindLoad body into ents (reused).
func decodeLoad(b []byte, ents []loadEntry) (at, intervalMs int64, out []loadEntry, err error) {
	r := reader{b: b}
	at = int64(r.uvarint())
	intervalMs = int64(r.uvarint())
	n := r.count(10)
	out = ents[:0]
	for range n {
		out = append(out, loadEntry{key: r.u64(), active: sat32(r.uvarint()), prefill: sat32(r.uvarint())})
	}
	return at, intervalMs, out, r.err
}

func sat32(v uint64) uint32 {
	if v > 1<<32-1 {
		return 1<<32 - 1
	}
	return uint32(v)
}

// appendReset encodes a kindReset message: key's cache was lost at wall ms.
func appendReset(dst []byte, h header, key uint64, at int64) []byte {
	h.kind = kindReset
	dst = appendHeader(dst, h)
	dst = binary.LittleEndian.AppendUint64(dst, key)
	return binary.AppendUvarint(dst, uint64(at))
}

func decodeReset(b []byte) (key uint64, at int64, err error) {
	r := reader{b: b}
	key = r.u64()
	at = int64(r.uvarint())
	return key, at, r.err
}
