package kdn

import (
	"io"
	"time"
)

// Message is any decoded, validatable KDN model. The interface is sealed:
// only this package's model types implement it, so every Message knows its
// exact validation rules and canonical form.
type Message interface {
	// ModelName is the reference model name (§1.1), e.g. "LookupArtifactRequest".
	ModelName() string
	check() *ValidationError
	writeJSON(w *jw)
}

// Codec decodes with an injectable clock and random source, for defaults
// such as timestamp, request_id and task_id. The zero Codec uses the wall
// clock and crypto/rand.
type Codec struct {
	Now  func() time.Time
	Rand io.Reader
}

// Decode parses and validates data as the named model.
func Decode(model string, data []byte) (Message, error) {
	return Codec{}.Decode(model, data)
}

// Decode parses and validates data as the named model. The error, when not
// nil, is a *ValidationError.
func (c Codec) Decode(model string, data []byte) (Message, error) {
	m, e := c.decode(model, data)
	if e != nil {
		return nil, e
	}
	return m, nil
}

func (c Codec) decode(model string, data []byte) (Message, *ValidationError) {
	dec := decoderFor(model)
	if dec == nil {
		return nil, verr(CodeUnknownModel, "", "model", "unknown model name")
	}
	v, e := parseJSON(data)
	if e != nil {
		return nil, e
	}
	if v.kind != jObject {
		return nil, verr(CodeInvalidType, "", "type:object", "a message must be a JSON object")
	}
	m, e := dec(newDecoder(c.Now, c.Rand), v)
	if e != nil {
		return nil, e
	}
	if e := m.check(); e != nil {
		return nil, e
	}
	return m, nil
}

// Validate checks m against every rule of its model.
func Validate(m Message) error {
	if e := m.check(); e != nil {
		return e
	}
	return nil
}

// Encode validates m and returns its canonical compact JSON, byte for byte
// what the reference emits (§1.3).
func Encode(m Message) ([]byte, error) {
	if e := m.check(); e != nil {
		return nil, e
	}
	var w jw
	m.writeJSON(&w)
	return w.b, nil
}

// Canonical decodes data as model and re-encodes it canonically.
func Canonical(model string, data []byte) ([]byte, error) {
	m, err := Decode(model, data)
	if err != nil {
		return nil, err
	}
	return Encode(m)
}
