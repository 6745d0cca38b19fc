package edge

import (
	"crypto/sha1"
	"encoding/hex"
)

// EndpointID derives a backend's KDN endpoint id from its URL: stable
// across restarts and replicas that name the backend the same way.
// It follows the contracts' canonical form, "endpoint_" + 32 hex digits of
// a UUIDv5 over the URL (see edge/kdn for the namespace the contracts use).
func EndpointID(url string) string {
	return "endpoint_" + uuid5Hex(endpointNamespace, url)
}

// endpointNamespace is the RFC 9562 URL namespace.
var endpointNamespace = [16]byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}

func uuid5Hex(ns [16]byte, name string) string {
	h := sha1.New()
	h.Write(ns[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return hex.EncodeToString(u[:])
}
