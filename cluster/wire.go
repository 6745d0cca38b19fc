package cluster

import (
	"encoding/binary"
	"errors"
	"hash/fnv"
)

// Wire format, version 1. Every message starts with a 14-byte header:
//
//	version u8 | kind u8 | fingerprint u32 LE | sender u64 LE
//
// The fingerprint digests what must agree between replicas for block hashes
// to mean the same thing (hash key, block size, CBR exclusions), so a
// misconfigured replica's messages are dropped rather than applied. Block
// hashes are uniformly random, so they travel as fixed 8 bytes; times and
// counts are varints. Backends travel as 64-bit keys of their endpoint ids,
// so replicas listing the same backends in another order still agree.
//
//	kindLocations: nb uvarint, nb × key u64 | base uvarint (wall ms)
//	               then records to the end:
//	               backend uvarint (index into the keys) | dt varint (ms from base) |
//	               n uvarint | n × hash u64
//	kindLoad:      at uvarint (wall ms) | interval uvarint (ms) | n uvarint |
//	               n × (key u64 | active uvarint | prefill uvarint); backends
//	               left out carry no load
//	kindReset:     key u64 | at uvarint (wall ms): locations of that backend
//	               older than at are gone
const (
	wireVersion   = 1
	headerSize    = 14
	kindLocations = 1
	kindLoad      = 2
	kindReset     = 3
)

var errShort = errors.New("truncated message")

type header struct {
	kind        byte
	fingerprint uint32
	sender      uint64
}

func appendHeader(dst []byte, h header) []byte {
	dst = append(dst, wireVersion, h.kind)
	dst = binary.LittleEndian.AppendUint32(dst, h.fingerprint)
	return binary.LittleEndian.AppendUint64(dst, h.sender)
}

func parseHeader(b []byte) (header, []byte, error) {
	if len(b) < headerSize {
		return header{}, nil, errShort
	}
	if b[0] != wireVersion {
		return header{}, nil, errors.New("unknown wire version")
	}
	return header{kind: b[1], fingerprint: binary.LittleEndian.Uint32(b[2:]),
		sender: binary.LittleEndian.Uint64(b[6:])}, b[headerSize:], nil
}

// backendKey names a backend on the wire.
func backendKey(endpointID string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(endpointID))
	return h.Sum64()
}

// reader decodes varints and fixed words, remembering the first error so
// decoders check once at the end of each record.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) u64() uint64 {
	if len(r.b) < 8 {
		r.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errShort
	}
	r.b = nil
}

// count reads a length and checks it against what is left, each item being
// at least min bytes, so a hostile length cannot make a decoder allocate.
func (r *reader) count(min int) int {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)/min) {
		r.fail()
		return 0
	}
	return int(n)
}
