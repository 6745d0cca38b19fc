package kdn

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"io"
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

// canonicalID implements §1.4 for an identity already serialised with
// sorted keys (see identityJSON).
func canonicalID(kind, identity string) string {
	return kind + "_" + uuid5Hex("cacheroute:v1:"+kind+":"+identity)
}

// randomHex returns a UUIDv4 as 32 hex digits, like Python's uuid4().hex.
func randomHex(r io.Reader) (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return hex.EncodeToString(b[:]), nil
}

// NewRequestID returns a fresh "req_<32 hex>" id, the envelope default.
func NewRequestID() string { return "req_" + mustRandomHex() }

// NewTaskID returns a fresh "cacheop_<32 hex>" id, the task default.
func NewTaskID() string { return "cacheop_" + mustRandomHex() }

func mustRandomHex() string {
	s, err := randomHex(rand.Reader)
	if err != nil {
		// crypto/rand never fails on supported platforms (Go 1.24+ panics
		// internally first); keep the signature simple for callers.
		panic("kdn: crypto/rand failed")
	}
	return s
}

// EndpointIDForName derives the canonical endpoint id of a named endpoint
// (§1.4: the identity is {"name": name} only).
func EndpointIDForName(name string) string {
	var w jw
	w.objStart()
	w.key("name")
	w.str(name)
	w.objEnd()
	return canonicalID("endpoint", string(w.b))
}

// hex32 reports whether s is exactly prefix followed by 32 lowercase hex digits.
func hex32(s, prefix string) bool {
	if len(s) != len(prefix)+32 || s[:len(prefix)] != prefix {
		return false
	}
	for i := len(prefix); i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

const (
	prefixEndpoint  = "endpoint_"
	prefixArtifact  = "artifact_"
	prefixOperation = "cacheop_"
)
