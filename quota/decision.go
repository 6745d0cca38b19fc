package quota

import (
	"strconv"
	"time"
)

// Which limit refused a request.
const (
	LimitNone = iota
	LimitRequests
	LimitTokens
)

// Decision is the outcome of Admit and what the answer's headers say.
// Limits of 0 (unlimited) have no headers.
type Decision struct {
	OK       bool
	Limited  int // LimitRequests or LimitTokens when refused
	Tenant   int
	Reserved int64 // tokens charged at admission

	ReqLimit, ReqRemaining int64
	ReqReset               int64 // ns until the requests bucket is full
	TokLimit, TokRemaining int64
	TokReset               int64
	// RetryAfter is how long until the refused request would be admitted
	// (ns; 0 when admitted).
	RetryAfter int64
}

// RetryAfterSeconds is the Retry-After value: whole seconds, rounded up,
// at least 1.
func (d *Decision) RetryAfterSeconds() int64 {
	return max((d.RetryAfter+1e9-1)/1e9, 1)
}

// AppendHeaders appends the rate-limit header lines, each ending in CRLF,
// as OpenAI sends them, and Retry-After when the request was refused.
func (d *Decision) AppendHeaders(b []byte) []byte {
	if d.ReqLimit > 0 {
		b = appendHeader(b, "x-ratelimit-limit-requests: ", d.ReqLimit)
		b = appendHeader(b, "x-ratelimit-remaining-requests: ", d.ReqRemaining)
		b = append(b, "x-ratelimit-reset-requests: "...)
		b = AppendDuration(b, d.ReqReset)
		b = append(b, "\r\n"...)
	}
	if d.TokLimit > 0 {
		b = appendHeader(b, "x-ratelimit-limit-tokens: ", d.TokLimit)
		b = appendHeader(b, "x-ratelimit-remaining-tokens: ", d.TokRemaining)
		b = append(b, "x-ratelimit-reset-tokens: "...)
		b = AppendDuration(b, d.TokReset)
		b = append(b, "\r\n"...)
	}
	if !d.OK {
		b = appendHeader(b, "Retry-After: ", d.RetryAfterSeconds())
		// OpenAI's SDKs prefer this one, to the millisecond.
		b = appendHeader(b, "retry-after-ms: ", max((d.RetryAfter+1e6-1)/1e6, 1))
	}
	return b
}

// AppendAnthropicHeaders appends the rate-limit header lines Anthropic's
// API sends (for /v1/messages), whose resets are instants (RFC 3339, UTC,
// to the second, rounded up) computed from now, and retry-after when the
// request was refused.
func (d *Decision) AppendAnthropicHeaders(b []byte, now time.Time) []byte {
	at := func(b []byte, ns int64) []byte {
		t := now.Add(time.Duration(ns)).UTC()
		if t.Nanosecond() != 0 {
			t = t.Truncate(time.Second).Add(time.Second)
		}
		return t.AppendFormat(b, time.RFC3339)
	}
	if d.ReqLimit > 0 {
		b = appendHeader(b, "anthropic-ratelimit-requests-limit: ", d.ReqLimit)
		b = appendHeader(b, "anthropic-ratelimit-requests-remaining: ", d.ReqRemaining)
		b = append(b, "anthropic-ratelimit-requests-reset: "...)
		b = append(at(b, d.ReqReset), "\r\n"...)
	}
	if d.TokLimit > 0 {
		b = appendHeader(b, "anthropic-ratelimit-tokens-limit: ", d.TokLimit)
		b = appendHeader(b, "anthropic-ratelimit-tokens-remaining: ", d.TokRemaining)
		b = append(b, "anthropic-ratelimit-tokens-reset: "...)
		b = append(at(b, d.TokReset), "\r\n"...)
	}
	if !d.OK {
		b = appendHeader(b, "retry-after: ", d.RetryAfterSeconds())
	}
	return b
}

func appendHeader(b []byte, name string, v int64) []byte {
	b = append(b, name...)
	b = strconv.AppendInt(b, v, 10)
	return append(b, "\r\n"...)
}

// AppendErrorBody appends the 429 body: Anthropic's error shape when
// anthropic (a /v1/messages request), OpenAI's otherwise.
func (d *Decision) AppendErrorBody(b []byte, anthropic bool) []byte {
	what, limit := "requests", d.ReqLimit
	if d.Limited == LimitTokens {
		what, limit = "tokens", d.TokLimit
	}
	if anthropic {
		b = append(b, `{"type":"error","error":{"type":"rate_limit_error","message":"Rate limit reached for `...)
	} else {
		b = append(b, `{"error":{"message":"Rate limit reached for `...)
	}
	b = append(b, what...)
	b = append(b, " per minute: limit "...)
	b = strconv.AppendInt(b, limit, 10)
	b = append(b, ". Please try again in "...)
	b = AppendDuration(b, d.RetryAfter)
	b = append(b, `."`...)
	if anthropic {
		return append(b, "}}\n"...)
	}
	b = append(b, `,"type":"`...)
	b = append(b, what...)
	return append(b, `","param":null,"code":"rate_limit_exceeded"}}`+"\n"...)
}

// AppendDuration appends ns rounded up to the millisecond in the form
// OpenAI's reset headers use, which is Go's time.Duration text: "0s",
// "17ms", "1s", "2.5s", "6m0s", "1h2m3.004s".
func AppendDuration(b []byte, ns int64) []byte {
	if ns <= 0 {
		return append(b, "0s"...)
	}
	ms := (ns + 1e6 - 1) / 1e6
	if ms < 1000 {
		b = strconv.AppendInt(b, ms, 10)
		return append(b, "ms"...)
	}
	h, m := ms/3_600_000, ms/60_000%60
	s, frac := ms/1000%60, ms%1000
	if h > 0 {
		b = strconv.AppendInt(b, h, 10)
		b = append(b, 'h')
	}
	if h > 0 || m > 0 {
		b = strconv.AppendInt(b, m, 10)
		b = append(b, 'm')
	}
	b = strconv.AppendInt(b, s, 10)
	if frac > 0 {
		d := [4]byte{'.', byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
		n := 4
		for d[n-1] == '0' {
			n--
		}
		b = append(b, d[:n]...)
	}
	return append(b, 's')
}
