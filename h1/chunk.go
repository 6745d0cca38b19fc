package h1

import (
	"errors"

	"github.com/kvca/kvca/internal/hexdigit"
)

// ErrChunk is a malformed chunked body.
var ErrChunk = errors.New("malformed chunked body")

// ChunkScan follows a chunked body (RFC 9112 §7.1) byte by byte as it
// arrives in pieces: to find where it ends while the bytes pass through
// unchanged (Scan), or to take its data out of the framing (Step).
type ChunkScan struct {
	state int
	size  int64 // data bytes left in the current chunk
	ndig  int   // hex digits seen in the size line
	// Trailer counts trailer bytes; they are bounded like a head.
	Trailer int
}

const (
	csSize      = iota // in a chunk-size line, before any extension
	csExt              // in a chunk-size line's extension
	csSizeLF           // saw CR ending the size line
	csData             // in chunk data
	csDataCR           // expecting CR after data
	csDataLF           // expecting LF after data
	csTrailer          // at the start of a trailer line (or the final CRLF)
	csTrailerL         // inside a trailer line
	csTrailerLF        // saw CR of a trailer line
	csEndLF            // saw CR of the final empty line
	csDone
)

// Step consumes a prefix of p: either framing bytes only (data false) or
// chunk data only (data true, p[:n] is data). done reports the end of the
// body, the final CRLF included in n.
func (s *ChunkScan) Step(p []byte) (n int, data, done bool, err error) {
	if s.state == csData {
		k := min(int64(len(p)), s.size)
		s.size -= k
		if s.size == 0 {
			s.state = csDataCR
		}
		return int(k), true, false, nil
	}
	for n < len(p) {
		if s.state == csData {
			return n, false, false, nil
		}
		c := p[n]
		n++
		switch s.state {
		case csSize:
			switch {
			case c == '\r':
				if s.ndig == 0 {
					return n, false, false, ErrChunk
				}
				s.state = csSizeLF
			case c == ';' || c == ' ' || c == '\t':
				if s.ndig == 0 {
					return n, false, false, ErrChunk
				}
				s.state = csExt
			default:
				d, ok := hexdigit.Value(c)
				if !ok || s.ndig == 15 {
					return n, false, false, ErrChunk
				}
				s.size = s.size<<4 | int64(d)
				s.ndig++
			}
		case csExt:
			if c == '\r' {
				s.state = csSizeLF
			} else if c < 0x20 && c != '\t' || c == 0x7f {
				return n, false, false, ErrChunk
			}
		case csSizeLF:
			if c != '\n' {
				return n, false, false, ErrChunk
			}
			s.ndig = 0
			if s.size == 0 {
				s.state = csTrailer
			} else {
				s.state = csData
			}
		case csDataCR:
			if c != '\r' {
				return n, false, false, ErrChunk
			}
			s.state = csDataLF
		case csDataLF:
			if c != '\n' {
				return n, false, false, ErrChunk
			}
			s.state = csSize
		case csTrailer, csTrailerL:
			s.Trailer++
			switch {
			case c == '\r' && s.state == csTrailer:
				s.state = csEndLF
			case c == '\r':
				s.state = csTrailerLF
			case c < 0x20 && c != '\t' || c == 0x7f || s.Trailer > MaxHeadBytes:
				return n, false, false, ErrChunk
			default:
				s.state = csTrailerL
			}
		case csTrailerLF:
			if c != '\n' {
				return n, false, false, ErrChunk
			}
			s.state = csTrailer
		case csEndLF:
			if c != '\n' {
				return n, false, false, ErrChunk
			}
			s.state = csDone
			return n, false, true, nil
		case csDone:
			return n - 1, false, true, nil
		}
	}
	return n, false, s.state == csDone, nil
}

// Scan consumes p as pass-through bytes: it returns how many belong to
// the body (all of p, or up to its end) and whether the body ended.
func (s *ChunkScan) Scan(p []byte) (n int, done bool, err error) {
	for n < len(p) {
		k, _, d, e := s.Step(p[n:])
		n += k
		if e != nil || d {
			return n, d, e
		}
	}
	return n, s.state == csDone, nil
}

// Between reports whether the bytes scanned so far end on a chunk
// boundary, where another chunk (an SSE error event) can still be sent.
func (s *ChunkScan) Between() bool { return s.state == csSize && s.ndig == 0 }

// AppendChunk appends p as one chunk.
func AppendChunk(b, p []byte) []byte {
	b = AppendHex(b, len(p))
	b = append(b, "\r\n"...)
	b = append(b, p...)
	return append(b, "\r\n"...)
}

// AppendHex appends n in lower-case hexadecimal.
func AppendHex(b []byte, n int) []byte {
	const digits = "0123456789abcdef"
	if n == 0 {
		return append(b, '0')
	}
	var buf [16]byte
	i := len(buf)
	for n > 0 {
		i--
		buf[i] = digits[n&0xf]
		n >>= 4
	}
	return append(b, buf[i:]...)
}

// DataSink takes a chunked body's data, its framing removed.
type DataSink interface {
	Data(p []byte)
}

// ScanTo is Scan, handing each piece of chunk data to sink (nil: none):
// one pass that both frames the body and decodes it for a reader.
func (s *ChunkScan) ScanTo(p []byte, sink DataSink) (n int, done bool, err error) {
	if sink == nil {
		return s.Scan(p)
	}
	for n < len(p) {
		k, data, d, e := s.Step(p[n:])
		if data && k > 0 {
			sink.Data(p[n : n+k])
		}
		n += k
		if e != nil || d {
			return n, d, e
		}
	}
	return n, s.state == csDone, nil
}
