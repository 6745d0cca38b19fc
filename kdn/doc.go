// Package kdn implements the KDN v1 wire contracts (contract version "kdn.v1"
// and the gateway capability contract "lmcache-gateway.v1"), as the
// repository's reference docs/kdn.md describes them: strict decoding,
// validation and canonical encoding of every message model.
//
// Messages are not self-describing, so callers always name the model:
//
//	msg, err := kdn.Decode("LookupArtifactRequest", body)
//	out, err := kdn.Encode(msg) // byte-exact reference serialisation
//
// Values are plain data. Decode returns a fresh value that shares nothing
// with the decoder, and Encode re-runs every validation rule before it writes,
// so a value that was modified after decoding (or built by hand) can never
// reach the wire unchecked. Treat decoded values as read-only copies; the
// gateways in the sub-package clone what they store.
//
// Errors are *ValidationError values carrying a stable code, the offending
// field path and the rule that was broken; their text never echoes input
// values or Go/back-end error strings.
package kdn
