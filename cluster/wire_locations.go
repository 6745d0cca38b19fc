package cluster

import "encoding/binary"

// locBatch accumulates location records for one kindLocations message.
type locBatch struct {
	keys   []uint64 // backend keys in message order
	slot   []int32  // local backend index → position in keys + 1; 0: absent
	base   int64
	body   []byte
	blocks int
	recs   int
}

func newLocBatch(backends int) *locBatch { return &locBatch{slot: make([]int32, backends)} }

func (lb *locBatch) reset() {
	lb.keys = lb.keys[:0]
	clear(lb.slot)
	lb.body = lb.body[:0]
	lb.blocks, lb.recs = 0, 0
}

func (lb *locBatch) empty() bool { return lb.recs == 0 }

// size is the encoded size so far, header excluded.
func (lb *locBatch) size() int { return len(lb.keys)*8 + len(lb.body) + 2*binary.MaxVarintLen64 }

// add records that backend (local index, wire key) held hashes at wall ms.
func (lb *locBatch) add(backend int, key uint64, at int64, hashes []uint64) {
	if lb.recs == 0 {
		lb.base = at
	}
	s := lb.slot[backend]
	if s == 0 {
		lb.keys = append(lb.keys, key)
		s = int32(len(lb.keys))
		lb.slot[backend] = s
	}
	lb.body = binary.AppendUvarint(lb.body, uint64(s-1))
	lb.body = binary.AppendVarint(lb.body, at-lb.base)
	lb.body = binary.AppendUvarint(lb.body, uint64(len(hashes)))
	for _, h := range hashes {
		lb.body = binary.LittleEndian.AppendUint64(lb.body, h)
	}
	lb.blocks += len(hashes)
	lb.recs++
}

func (lb *locBatch) encode(dst []byte, h header) []byte {
	h.kind = kindLocations
	dst = appendHeader(dst, h)
	dst = binary.AppendUvarint(dst, uint64(len(lb.keys)))
	for _, k := range lb.keys {
		dst = binary.LittleEndian.AppendUint64(dst, k)
	}
	dst = binary.AppendUvarint(dst, uint64(lb.base))
	return append(dst, lb.body...)
}

// decodeLocations calls fn for each record of a kindLocations body (the
// header already parsed). hashes is decoded into *scratch and valid only
// during the call. Records before a malformed one are still delivered: each
// is complete in itself.
func decodeLocations(b []byte, scratch *[]uint64, fn func(key uint64, at int64, hashes []uint64)) error {
	r := reader{b: b}
	nk := r.count(8)
	keys := make([]uint64, nk)
	for i := range keys {
		keys[i] = r.u64()
	}
	base := int64(r.uvarint())
	if r.err != nil {
		return r.err
	}
	for len(r.b) > 0 {
		bi := r.uvarint()
		dt := r.varint()
		n := r.count(8)
		if r.err != nil {
			return r.err
		}
		if bi >= uint64(len(keys)) {
			return errShort
		}
		hs := (*scratch)[:0]
		for range n {
			hs = append(hs, r.u64())
		}
		*scratch = hs
		fn(keys[bi], base+dt, hs)
	}
	return nil
}
