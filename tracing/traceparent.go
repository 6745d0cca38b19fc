package tracing

import "github.com/kvca/kvca/internal/hexdigit"

// traceparentLen is the length of a version-00 traceparent value:
// "00-" 32 hex "-" 16 hex "-" 2 hex.
const traceparentLen = 55

// ParseTraceparent parses a W3C traceparent header value. It accepts
// version 00 exactly and, as the recommendation asks, later versions by
// their first four fields; all-zero ids, version ff and uppercase hex are
// invalid.
func ParseTraceparent(v []byte) (tid [16]byte, sid [8]byte, flags byte, ok bool) {
	if len(v) < traceparentLen || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return tid, sid, 0, false
	}
	ver, ok1 := hexByte(v[0], v[1])
	if !ok1 || ver == 0xff || (ver == 0 && len(v) != traceparentLen) || (ver != 0 && len(v) > traceparentLen && v[traceparentLen] != '-') {
		return tid, sid, 0, false
	}
	var any byte
	for i := range tid {
		b, ok := hexByte(v[3+2*i], v[4+2*i])
		if !ok {
			return tid, sid, 0, false
		}
		tid[i] = b
		any |= b
	}
	if any == 0 {
		return tid, sid, 0, false
	}
	any = 0
	for i := range sid {
		b, ok := hexByte(v[36+2*i], v[37+2*i])
		if !ok {
			return tid, sid, 0, false
		}
		sid[i] = b
		any |= b
	}
	if any == 0 {
		return tid, sid, 0, false
	}
	flags, ok = hexByte(v[53], v[54])
	return tid, sid, flags, ok
}

func hexByte(a, b byte) (byte, bool) {
	x, ok1 := unhex(a)
	y, ok2 := unhex(b)
	return x<<4 | y, ok1 && ok2
}

// unhex reads a lowercase hex digit: a traceparent's uppercase hex is
// invalid.
func unhex(c byte) (byte, bool) {
	if c >= 'A' && c <= 'F' {
		return 0, false
	}
	return hexdigit.Value(c)
}

const hexDigits = "0123456789abcdef"

func formatTraceparent(dst *[traceparentLen]byte, tid [16]byte, sid [8]byte, flags byte) {
	dst[0], dst[1], dst[2] = '0', '0', '-'
	for i, b := range tid {
		dst[3+2*i], dst[4+2*i] = hexDigits[b>>4], hexDigits[b&15]
	}
	dst[35] = '-'
	for i, b := range sid {
		dst[36+2*i], dst[37+2*i] = hexDigits[b>>4], hexDigits[b&15]
	}
	dst[52] = '-'
	dst[53], dst[54] = hexDigits[flags>>4], hexDigits[flags&15]
}
