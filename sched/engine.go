package sched

// EngineSignals is what a backend's own metrics endpoint last said about
// its queue and its KV cache (engine telemetry). Policies may weigh it in;
// a signal older than the telemetry's staleness bound is ignored.
type EngineSignals struct {
	Running int32 // requests the engine is running (vllm:num_requests_running)
	Waiting int32 // requests queued in the engine (vllm:num_requests_waiting)
	// KVUsage is the fraction of the engine's KV cache in use, 0..1.
	KVUsage float32
	// CapacityTokens is how many tokens the engine's KV cache holds; 0
	// when the engine does not say.
	CapacityTokens int64
	// At is when the signals were read (unix ms); 0: never.
	At int64
}

// SetEngine records the latest engine signals of b. Telemetry calls it
// about once a second, so it may allocate.
func (b *Backend) SetEngine(s EngineSignals) {
	v := s
	b.engine.Store(&v)
}

// Engine returns b's engine signals if they were read at most maxAge ms
// before now (unix ms); false when there are none that fresh.
func (b *Backend) Engine(now, maxAge int64) (EngineSignals, bool) {
	p := b.engine.Load()
	if p == nil || p.At == 0 || now-p.At > maxAge {
		return EngineSignals{}, false
	}
	return *p, true
}
