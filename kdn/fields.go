package kdn

import (
	"crypto/rand"
	"io"
	"strconv"
	"strings"
	"time"
)

// decoder carries what defaults need: one clock reading per message (so all
// "now" defaults of one message agree) and a random source for generated ids.
type decoder struct {
	now  time.Time
	rand io.Reader
}

func newDecoder(now func() time.Time, r io.Reader) *decoder {
	if now == nil {
		now = time.Now
	}
	if r == nil {
		r = rand.Reader
	}
	return &decoder{now: wireTime(now().UTC()), rand: r}
}

func (d *decoder) randomID(prefix string) string {
	s, err := randomHex(d.rand)
	if err != nil {
		s = strings.Repeat("0", 32) // unreachable with crypto/rand; keeps the id well-formed
	}
	return prefix + s
}

// obj reads the fields of one JSON object. The first error sticks and turns
// every later accessor into a no-op, so decoders read straight through.
type obj struct {
	d    *decoder
	path string
	m    map[string]jvalue
	err  *ValidationError
}

// object opens v as an object whose keys must all be in allowed: unknown
// keys are the contract's only defence against smuggled secrets (§1.2).
func (d *decoder) object(v jvalue, path string, allowed ...string) *obj {
	o := &obj{d: d, path: path}
	if v.kind != jObject {
		o.err = verr(CodeInvalidType, path, "type:object", "expected a JSON object")
		return o
	}
	o.m = make(map[string]jvalue, len(v.obj))
	for _, mem := range v.obj {
		known := false
		for _, a := range allowed {
			if a == mem.key {
				known = true
				break
			}
		}
		if !known {
			o.err = verr(CodeUnknownField, keyPath(path, mem.key), "extra_forbidden", "unknown fields are not allowed")
			return o
		}
		o.m[mem.key] = mem.val
	}
	return o
}

func (o *obj) fail(key, code, rule, msg string) {
	if o.err == nil {
		o.err = verr(code, joinPath(o.path, key), rule, msg)
	}
}

// field returns the raw value. present=false means absent; a null value is
// reported as present with kind jNull.
func (o *obj) field(key string) (jvalue, bool) {
	if o.err != nil {
		return jvalue{}, false
	}
	v, ok := o.m[key]
	return v, ok
}

// need returns a present, non-null value or records why there is none.
func (o *obj) need(key string) (jvalue, bool) {
	v, ok := o.field(key)
	if o.err != nil {
		return v, false
	}
	if !ok {
		o.fail(key, CodeMissingField, "required", "field is required")
		return v, false
	}
	if v.kind == jNull {
		o.fail(key, CodeNullNotAllowed, "not_nullable", "field must not be null")
		return v, false
	}
	return v, true
}

// withDefault returns (value, true) when the key is present; absent means
// "use the default"; null is invalid because the field is not nullable.
func (o *obj) withDefault(key string) (jvalue, bool) {
	v, ok := o.field(key)
	if !ok || o.err != nil {
		return v, false
	}
	if v.kind == jNull {
		o.fail(key, CodeNullNotAllowed, "not_nullable", "field has a default but must not be null")
		return v, false
	}
	return v, true
}

// nullable returns (value, true) for a present non-null value.
func (o *obj) nullable(key string) (jvalue, bool) {
	v, ok := o.field(key)
	if !ok || o.err != nil || v.kind == jNull {
		return v, false
	}
	return v, true
}

func (o *obj) asString(key string, v jvalue) string {
	if v.kind != jString {
		o.fail(key, CodeInvalidType, "type:string", "expected a string")
		return ""
	}
	return v.s
}

// asInt accepts only integer literals: Python's lax coercions (1.0, "1",
// true) are outside the contract and rejected here (§1.2).
func (o *obj) asInt(key string, v jvalue) int64 {
	n, e := jsonInt(v, joinPath(o.path, key))
	if e != nil && o.err == nil {
		o.err = e
	}
	return n
}

func jsonInt(v jvalue, path string) (int64, *ValidationError) {
	if v.kind != jNumber || strings.ContainsAny(v.s, ".eE") {
		return 0, verr(CodeInvalidType, path, "type:integer", "expected an integer")
	}
	n, err := strconv.ParseInt(v.s, 10, 64)
	if err != nil {
		return 0, verr(CodeOutOfRange, path, "int64", "integer is outside the signed 64-bit range")
	}
	return n, nil
}

func (o *obj) asBool(key string, v jvalue) bool {
	if v.kind != jBool {
		o.fail(key, CodeInvalidType, "type:boolean", "expected a boolean")
	}
	return v.b
}

func (o *obj) asTime(key string, v jvalue) time.Time {
	if v.kind != jString {
		o.fail(key, CodeInvalidType, "type:datetime", "expected an RFC 3339 datetime string")
		return time.Time{}
	}
	t, code := parseDatetime(v.s)
	switch code {
	case CodeNaiveDatetime:
		o.fail(key, code, "datetime:aware", "datetime must carry a timezone offset")
	case CodeInvalidDatetime:
		o.fail(key, code, "datetime:format", "expected an RFC 3339 datetime (YYYY-MM-DDTHH:MM:SS[.ffffff]Z)")
	}
	return t
}

func (o *obj) str(key string) string {
	if v, ok := o.need(key); ok {
		return o.asString(key, v)
	}
	return ""
}

func (o *obj) strDef(key, def string) string {
	if v, ok := o.withDefault(key); ok {
		return o.asString(key, v)
	}
	return def
}

func (o *obj) strOpt(key string) Opt[string] {
	if v, ok := o.nullable(key); ok {
		return Some(o.asString(key, v))
	}
	return None[string]()
}

func (o *obj) int(key string) int64 {
	if v, ok := o.need(key); ok {
		return o.asInt(key, v)
	}
	return 0
}

func (o *obj) intDef(key string, def int64) int64 {
	if v, ok := o.withDefault(key); ok {
		return o.asInt(key, v)
	}
	return def
}

func (o *obj) intOpt(key string) Opt[int64] {
	if v, ok := o.nullable(key); ok {
		return Some(o.asInt(key, v))
	}
	return None[int64]()
}

func (o *obj) boolean(key string) bool {
	if v, ok := o.need(key); ok {
		return o.asBool(key, v)
	}
	return false
}

func (o *obj) boolDef(key string, def bool) bool {
	if v, ok := o.withDefault(key); ok {
		return o.asBool(key, v)
	}
	return def
}

func (o *obj) boolOpt(key string) Opt[bool] {
	if v, ok := o.nullable(key); ok {
		return Some(o.asBool(key, v))
	}
	return None[bool]()
}

// timeNow reads a datetime that defaults to the decoder's clock.
func (o *obj) timeNow(key string) time.Time {
	if v, ok := o.withDefault(key); ok {
		return o.asTime(key, v)
	}
	return o.d.now
}

func (o *obj) timeOpt(key string) Opt[time.Time] {
	if v, ok := o.nullable(key); ok {
		return Some(o.asTime(key, v))
	}
	return None[time.Time]()
}

// profile reads a normalising runtime_profile; required=false defaults to v1.
// null is never accepted: the reference resolves it to auto and rejects it.
func (o *obj) profile(key string, required bool) RuntimeProfile {
	v, ok := o.field(key)
	if o.err != nil {
		return ""
	}
	if !ok {
		if required {
			o.fail(key, CodeMissingField, "required", "field is required")
		}
		return ProfileV1
	}
	p, e := normaliseProfile(v, joinPath(o.path, key))
	if e != nil {
		o.err = e
	}
	return p
}

// elemDecoder decodes one nested value at path.
type elemDecoder[T any] func(d *decoder, v jvalue, path string) (T, *ValidationError)

func (o *obj) decodeAt(key string, v jvalue, dec func(*decoder, jvalue, string) *ValidationError) {
	if e := dec(o.d, v, joinPath(o.path, key)); e != nil && o.err == nil {
		o.err = e
	}
}

func nested[T any](o *obj, key string, dec elemDecoder[T]) T {
	var out T
	if v, ok := o.need(key); ok {
		o.decodeAt(key, v, func(d *decoder, v jvalue, p string) (e *ValidationError) {
			out, e = dec(d, v, p)
			return e
		})
	}
	return out
}

func nestedOpt[T any](o *obj, key string, dec elemDecoder[T]) Opt[T] {
	var out Opt[T]
	if v, ok := o.nullable(key); ok {
		o.decodeAt(key, v, func(d *decoder, v jvalue, p string) *ValidationError {
			x, e := dec(d, v, p)
			out = Some(x)
			return e
		})
	}
	return out
}

func decodeList[T any](d *decoder, v jvalue, path string, dec elemDecoder[T]) ([]T, *ValidationError) {
	if v.kind != jArray {
		return nil, verr(CodeInvalidType, path, "type:array", "expected an array")
	}
	out := make([]T, 0, len(v.arr))
	for i, el := range v.arr {
		x, e := dec(d, el, indexPath(path, i))
		if e != nil {
			return nil, e
		}
		out = append(out, x)
	}
	return out, nil
}

// listDef reads a non-nullable array that defaults to empty.
func listDef[T any](o *obj, key string, dec elemDecoder[T]) []T {
	out := []T{}
	if v, ok := o.withDefault(key); ok {
		o.decodeAt(key, v, func(d *decoder, v jvalue, p string) (e *ValidationError) {
			out, e = decodeList(d, v, p, dec)
			return e
		})
	}
	return out
}

// listReq reads a required, non-nullable array.
func listReq[T any](o *obj, key string, dec elemDecoder[T]) []T {
	var out []T
	if v, ok := o.need(key); ok {
		o.decodeAt(key, v, func(d *decoder, v jvalue, p string) (e *ValidationError) {
			out, e = decodeList(d, v, p, dec)
			return e
		})
	}
	return out
}

func listOpt[T any](o *obj, key string, dec elemDecoder[T]) Opt[[]T] {
	var out Opt[[]T]
	if v, ok := o.nullable(key); ok {
		o.decodeAt(key, v, func(d *decoder, v jvalue, p string) *ValidationError {
			x, e := decodeList(d, v, p, dec)
			out = Some(x)
			return e
		})
	}
	return out
}

func decString(_ *decoder, v jvalue, path string) (string, *ValidationError) {
	if v.kind != jString {
		return "", verr(CodeInvalidType, path, "type:string", "expected a string")
	}
	return v.s, nil
}

func decInt(_ *decoder, v jvalue, path string) (int64, *ValidationError) {
	return jsonInt(v, path)
}
