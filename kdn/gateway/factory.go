package gateway

import "github.com/kvca/kvca/kdn"

// New builds the gateway for one transport kind of the snapshot. The kind
// must be bound in the snapshot (runtime isolation then guarantees mock ⇔
// test/mock and legacy_redis ⇔ legacy); production kinds are deliberately
// not implemented here: kvca's live gateway is built by its own package.
func New(s kdn.CapabilitySnapshot, kind kdn.TransportKind, f Fixtures, o Options) (Gateway, error) {
	if kdn.Validate(s) != nil {
		return nil, ErrInvalidSnapshot
	}
	if !s.HasTransport(kind) {
		return nil, ErrTransportNotBound
	}
	switch kind {
	case kdn.TransportMock:
		m, err := NewMock(s, f, o)
		if err != nil {
			return nil, err // never a typed-nil Gateway
		}
		return m, nil
	case kdn.TransportLegacyRedis:
		l, err := NewLegacy(s, f, o)
		if err != nil {
			return nil, err
		}
		return l, nil
	default:
		return nil, ErrNotImplemented
	}
}
