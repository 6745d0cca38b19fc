// Package kdnid derives the KDN contracts' canonical ids: the UUIDv5 of an
// object's kind and identity, and the endpoint id of a named endpoint. It
// stands apart from package kdn so that the proxy (edge) can name its
// backends' endpoints without importing the KDN tree, and kdn derives every
// id through it (docs/kdn.md, "Endpoints").
package kdnid

import (
	"crypto/sha1"
	"encoding/hex"
)

// nsURL is the RFC 4122 URL namespace 6ba7b811-9dad-11d1-80b4-00c04fd430c8,
// kept as a constant string so the package holds no mutable state.
const nsURL = "\x6b\xa7\xb8\x11\x9d\xad\x11\xd1\x80\xb4\x00\xc0\x4f\xd4\x30\xc8"

// uuid5Hex is UUIDv5 (SHA-1, URL namespace) as 32 lowercase hex digits.
// Computed here rather than with a UUID library: it is the whole algorithm.
func uuid5Hex(name string) string {
	h := sha1.New()
	h.Write([]byte(nsURL))
	h.Write([]byte(name))
	sum := h.Sum(nil)[:16]
	sum[6] = sum[6]&0x0f | 0x50
	sum[8] = sum[8]&0x3f | 0x80
	return hex.EncodeToString(sum)
}

// Canonical is the canonical id of an object of kind whose identity is
// already serialised as compact JSON with sorted keys: kind, '_', then the
// UUIDv5 of "cacheroute:v1:<kind>:<identity>" as 32 hex digits.
func Canonical(kind, identity string) string {
	return kind + "_" + uuid5Hex("cacheroute:v1:"+kind+":"+identity)
}

// Endpoint is the canonical endpoint id of a named endpoint: its identity
// is {"name": name} only.
func Endpoint(name string) string {
	b := append([]byte(nil), `{"name":`...)
	b = AppendJSONString(b, name)
	b = append(b, '}')
	return Canonical("endpoint", string(b))
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as a JSON string in the byte form the KDN
// reference emits (pydantic model_dump_json): raw UTF-8, only '"', '\\' and
// control characters escaped. The same escaping is Python's
// json.dumps(ensure_ascii=False), so it also serves canonical identities.
func AppendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
