package sniff

import "testing"

func FuzzSniff(f *testing.F) {
	for _, c := range samples() {
		f.Add([]byte(c.body), uint16(7), uint8(c.f))
	}
	f.Fuzz(func(t *testing.T, body []byte, cut uint16, format uint8) {
		var s Sniffer
		s.Reset(Format(format) & SSE)
		step := int(cut%512) + 1
		for i := 0; i < len(body); i += step {
			s.Feed(body[i:min(i+step, len(body))])
		}
		s.Close()
		p, c, _ := s.Usage()
		e, eok := s.EngineCached()
		if p < 0 || c < 0 || e < 0 || (!eok && e != 0) || len(s.ID()) > MaxID || s.depth < 0 || s.depth > MaxDepth {
			t.Fatalf("prompt %d completion %d engine cached %d %v id %d bytes depth %d", p, c, e, eok, len(s.ID()), s.depth)
		}
		// Whatever the pieces, the outcome is the same as in one piece.
		var w Sniffer
		w.Reset(Format(format) & SSE)
		w.Feed(body)
		w.Close()
		wp, wc, wok := w.Usage()
		_, _, ok := s.Usage()
		if wp != p || wc != c || wok != ok || string(w.ID()) != string(s.ID()) {
			t.Fatalf("pieces of %d: %d %d %v %q; whole: %d %d %v %q", step, p, c, ok, s.ID(), wp, wc, wok, w.ID())
		}
		we, weok := w.EngineCached()
		r, cr := s.CacheTokens()
		wr, wcr := w.CacheTokens()
		if we != e || weok != eok || wr != r || wcr != cr {
			t.Fatalf("pieces of %d: engine cached %d %v, cache %d %d; whole: %d %v, %d %d", step, e, eok, r, cr, we, weok, wr, wcr)
		}
	})
}
