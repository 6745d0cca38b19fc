package admit

// The high_reserve rule (Config.HighReserve, --queue-high-reserve): of
// each backend's slots, the last HighReserve free ones are class High's:
// a lower class is granted a slot there only while more than the reserve
// stay free.

// highReserveOpen reports whether a backend with others of its limit
// slots held takes a request of class c: c is High, no reserve is set, or
// the slots left free would be more than the reserve. A limit an engine's
// queue lowered (engine_aware) keeps one slot for every class.
func highReserveOpen(c Class, reserve, limit, others int32) bool {
	return c == High || reserve <= 0 || others+min(reserve, limit-1) < limit
}
