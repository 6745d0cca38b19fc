package kdn

import (
	"crypto/rand"
	"encoding/hex"
	"io"

	"github.com/kvca/kvca/internal/kdnid"
)

// canonicalID implements §1.4 for an identity already serialised with
// sorted keys (see identityJSON).
func canonicalID(kind, identity string) string { return kdnid.Canonical(kind, identity) }

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
func EndpointIDForName(name string) string { return kdnid.Endpoint(name) }

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
