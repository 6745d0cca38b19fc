package h2grpc

import (
	"errors"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// headerBlock is a header block as the reader decodes it: a HEADERS
// frame and its CONTINUATIONs, one fragment at a time as each frame is
// read, into fields reused from block to block. x/net's framer decodes
// blocks too, but made a frame and grew a new slice of fields for every
// request; the checks here are its checks (RFC 9113 §8.2, §8.3 and the
// header list's bound).
type headerBlock struct {
	dec *hpack.Decoder
	max uint32 // SETTINGS_MAX_HEADER_LIST_SIZE offered

	id        uint32
	endStream bool
	fields    []hpack.HeaderField
	// remain is what the header list may still take; trailerRemain, what
	// fields named in a "trailer" header may (counted apart, as x/net's
	// framer does).
	remain, trailerRemain uint32
	truncated             bool // a field went over the bound: fields is cut
	sawRegular            bool
	invalid               error // a field the RFC calls malformed
}

func newHeaderBlock(max uint32) *headerBlock {
	b := &headerBlock{max: max}
	b.dec = hpack.NewDecoder(4096, b.emit)
	b.dec.SetMaxStringLength(int(max))
	return b
}

// begin starts the block of f.
func (b *headerBlock) begin(f *http2.HeadersFrame) {
	clear(b.fields) // the last block's strings go
	b.id, b.endStream, b.fields = f.StreamID, f.StreamEnded(), b.fields[:0]
	b.remain, b.trailerRemain, b.truncated, b.sawRegular, b.invalid = b.max, b.max, false, false, nil
	b.dec.SetEmitEnabled(true)
}

// write decodes the block's next fragment. A fragment far over what
// the list may still take, or one following a malformed field, ends the
// connection rather than be decoded for nothing; so does a fragment
// HPACK cannot decode, since the connection's table is then lost.
func (b *headerBlock) write(frag []byte, continuation bool) error {
	if int64(len(frag)) > 2*(int64(b.remain)+int64(b.trailerRemain)) {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if continuation && b.invalid != nil {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if _, err := b.dec.Write(frag); err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	return nil
}

// end ends the block: a connection error when HPACK's state is broken,
// else the stream's error for a malformed block (nil: none).
func (b *headerBlock) end() (streamErr, connErr error) {
	if err := b.dec.Close(); err != nil {
		return nil, http2.ConnectionError(http2.ErrCodeCompression)
	}
	if b.invalid != nil {
		return b.invalid, nil
	}
	return b.checkPseudos(), nil
}

func (b *headerBlock) emit(hf hpack.HeaderField) {
	if !httpguts.ValidHeaderFieldValue(hf.Value) {
		b.invalid = errors.New("h2grpc: invalid value of header " + hf.Name)
	}
	if strings.HasPrefix(hf.Name, ":") {
		if b.sawRegular {
			b.invalid = errors.New("h2grpc: pseudo-header after a regular header")
		}
	} else {
		b.sawRegular = true
		if !validFieldName(hf.Name) {
			b.invalid = errors.New("h2grpc: invalid header name")
		}
	}
	if b.invalid != nil {
		b.dec.SetEmitEnabled(false)
		return
	}
	remain, size := &b.remain, hf.Size()
	if hf.Name == "trailer" {
		// Each field it names counts as a field of its own.
		n := uint32(strings.Count(hf.Value, ",") + 1)
		remain, size = &b.trailerRemain, uint32(len(hf.Value))-n+1+n*hpack.HeaderField{}.Size()
	}
	if size > *remain {
		b.dec.SetEmitEnabled(false)
		b.truncated = true
		b.remain, b.trailerRemain = 0, 0
		return
	}
	*remain -= size
	b.fields = append(b.fields, hf)
}

// validFieldName: a token in lower case (RFC 9113 §8.2.1).
func validFieldName(v string) bool {
	if v == "" {
		return false
	}
	for _, r := range v {
		if !httpguts.IsTokenRune(r) || 'A' <= r && r <= 'Z' {
			return false
		}
	}
	return true
}

// checkPseudos: pseudo-headers known, each once, of a request or of a
// response but not both (RFC 9113 §8.3).
func (b *headerBlock) checkPseudos() error {
	var request, response bool
	for i, hf := range b.fields {
		if !strings.HasPrefix(hf.Name, ":") {
			break // they come first (emit)
		}
		switch hf.Name {
		case ":method", ":path", ":scheme", ":authority", ":protocol":
			request = true
		case ":status":
			response = true
		default:
			return errors.New("h2grpc: unknown pseudo-header " + hf.Name)
		}
		for _, before := range b.fields[:i] {
			if before.Name == hf.Name {
				return errors.New("h2grpc: pseudo-header " + hf.Name + " twice")
			}
		}
	}
	if request && response {
		return errors.New("h2grpc: request and response pseudo-headers mixed")
	}
	return nil
}

// pseudo is the value of pseudo-header name (without its colon).
func (b *headerBlock) pseudo(name string) string {
	for _, hf := range b.fields {
		if !strings.HasPrefix(hf.Name, ":") {
			break
		}
		if hf.Name[1:] == name {
			return hf.Value
		}
	}
	return ""
}
