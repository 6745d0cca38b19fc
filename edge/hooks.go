package edge

// OnBackendReset registers f to run after a backend's locations were
// dropped and its generation bumped (it recovered from unhealthy, engine
// telemetry saw its engine restart, a reload took its slot, or
// ResetBackend was called), with the new generation; once per bump, so
// not again when the second detector of one restart finds it accounted
// for. It runs on the goroutine that reset the backend (its health loop
// or scraper, mostly), so f must be quick; the KDN gateway uses it to
// persist generations. Call before Start.
func (s *Server) OnBackendReset(f func(backend int, gen uint32)) {
	s.resetHooks = append(s.resetHooks, f)
}

// backendReset runs the hooks registered with OnBackendReset.
func (s *Server) backendReset(i int, gen uint32) {
	for _, f := range s.resetHooks {
		f(i, gen)
	}
}
