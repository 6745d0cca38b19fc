package kdn

import (
	"strconv"
	"time"
)

// parseDatetime accepts the RFC 3339 form the contract uses:
// YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM). Python's lax extras (space
// separator, lowercase z, missing seconds, epoch numbers) are rejected, as
// the contracts kvca answers (docs/kdn.md) allow. Fractions beyond
// microseconds are truncated, as the reference does. A zero offset (Z, +00:00, -00:00) yields a UTC time;
// any other offset is kept so that CacheArtifact.created_at can re-emit it.
func parseDatetime(s string) (time.Time, string) {
	bad := func() (time.Time, string) { return time.Time{}, CodeInvalidDatetime }
	if len(s) < 19 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return bad()
	}
	num := func(from, to int) int {
		n := 0
		for i := from; i < to; i++ {
			c := s[i]
			if c < '0' || c > '9' {
				return -1
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	year, month, day := num(0, 4), num(5, 7), num(8, 10)
	hour, minute, sec := num(11, 13), num(14, 16), num(17, 19)
	if year < 1 || month < 1 || month > 12 || day < 1 || day > daysIn(year, month) ||
		hour < 0 || hour > 23 || minute < 0 || minute > 59 || sec < 0 || sec > 59 {
		return bad()
	}
	rest := s[19:]
	micro := 0
	if len(rest) > 0 && rest[0] == '.' {
		i := 1
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			if i <= 6 {
				micro = micro*10 + int(rest[i]-'0')
			}
			i++
		}
		if i == 1 {
			return bad()
		}
		for d := i; d <= 6; d++ {
			micro *= 10
		}
		rest = rest[i:]
	}
	var loc *time.Location
	switch {
	case rest == "":
		return time.Time{}, CodeNaiveDatetime
	case rest == "Z":
		loc = time.UTC
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, om := atoi2(rest[1:3]), atoi2(rest[4:6])
		if oh < 0 || oh > 23 || om < 0 || om > 59 {
			return bad()
		}
		off := oh*3600 + om*60
		if rest[0] == '-' {
			off = -off
		}
		if off == 0 {
			loc = time.UTC
		} else {
			loc = time.FixedZone("", off)
		}
	default:
		return bad()
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, micro*1000, loc), ""
}

func atoi2(s string) int {
	if s[0] < '0' || s[0] > '9' || s[1] < '0' || s[1] > '9' {
		return -1
	}
	return int(s[0]-'0')*10 + int(s[1]-'0')
}

func daysIn(year, month int) int {
	switch month {
	case 4, 6, 9, 11:
		return 30
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	}
	return 31
}

// formatDatetime renders t as the reference does: seconds precision when the
// microsecond part is zero, otherwise exactly six fraction digits; a zero
// offset is written Z, any other offset ±HH:MM.
func formatDatetime(t time.Time) string {
	_, off := t.Zone()
	b := make([]byte, 0, 32)
	b = t.AppendFormat(b, "2006-01-02T15:04:05")
	if us := t.Nanosecond() / 1000; us != 0 {
		b = append(b, '.')
		s := strconv.Itoa(us)
		for i := len(s); i < 6; i++ {
			b = append(b, '0')
		}
		b = append(b, s...)
	}
	if off == 0 {
		return string(append(b, 'Z'))
	}
	sign := byte('+')
	if off < 0 {
		sign, off = '-', -off
	}
	b = append(b, sign, byte('0'+off/36000), byte('0'+off/3600%10), ':', byte('0'+off/600%6), byte('0'+off/60%10))
	return string(b)
}

func isUTC(t time.Time) bool {
	_, off := t.Zone()
	return off == 0
}

// inWireRange reports whether t can be written in the 4-digit-year form
// with a whole-minute offset; hand-built values may be outside it.
func inWireRange(t time.Time) bool {
	_, off := t.Zone()
	y := t.Year()
	return y >= 1 && y <= 9999 && off%60 == 0 && off > -86400 && off < 86400
}

// Truncate to microseconds: the wire cannot carry more and comparisons
// must agree with what a round trip would see.
func wireTime(t time.Time) time.Time {
	return t.Truncate(time.Microsecond)
}

// freshAt implements §7.3 freshness: observed ≤ t < expires.
func freshAt(observed, expires Opt[time.Time], t time.Time) bool {
	o, ok1 := observed.Get()
	e, ok2 := expires.Get()
	return ok1 && ok2 && !t.Before(o) && t.Before(e)
}
