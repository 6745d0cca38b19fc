package kdn

// Opt is a nullable value: the zero Opt is JSON null. It is a value type so
// that copying a message copies its optional fields too (no shared pointers).
type Opt[T any] struct {
	v  T
	ok bool
}

// Some returns a non-null Opt holding v.
func Some[T any](v T) Opt[T] { return Opt[T]{v: v, ok: true} }

// None returns the null Opt.
func None[T any]() Opt[T] { return Opt[T]{} }

// Get returns the value and whether it is non-null.
func (o Opt[T]) Get() (T, bool) { return o.v, o.ok }

// IsSet reports whether the value is non-null.
func (o Opt[T]) IsSet() bool { return o.ok }

// Value returns the value, or the zero T when null.
func (o Opt[T]) Value() T { return o.v }
