package workload

// textSource produces deterministic filler text, BytesPerToken bytes a token:
// three lowercase letters and a space, so it never needs JSON escaping and
// the mock engine counts exactly one token per word.
type textSource struct{ state uint64 }

func newTextSource(seed uint64) textSource {
	return textSource{state: seed*0x9e3779b97f4a7c15 + 0x632be59bd9b4e5}
}

func (s *textSource) next() uint64 {
	s.state += 0x9e3779b97f4a7c15
	z := s.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// appendTokens appends n tokens of text.
func (s *textSource) appendTokens(dst []byte, n int) []byte {
	for i := 0; i < n; i++ {
		r := s.next()
		dst = append(dst, 'a'+byte(r%26), 'a'+byte((r>>8)%26), 'a'+byte((r>>16)%26), ' ')
	}
	return dst
}
