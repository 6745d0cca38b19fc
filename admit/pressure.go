package admit

import "time"

// overloaded reports whether the queue sheds: a waiter was shed for its
// timeout or a full queue within the last second. Several rules apply
// only then (late, spared, stale tenant, tenant reserve, holder late).
func (a *Admitter) overloaded(now int64) bool {
	at := a.shedAt.Load()
	return at != 0 && now-at < int64(time.Second)
}

// retryAfterLocked is the Retry-After of a shed now (retryAfter).
func (a *Admitter) retryAfterLocked(now int64) int {
	a.sampleRate(now)
	return retryAfter(a.n, a.rate, a.timeout)
}

// retryAfter estimates, in whole seconds, how long the queue takes to
// drain n waiters and one more at rate releases a second, between 1 and
// the queue timeout (rounded up); the timeout when no rate is known yet.
func retryAfter(n int, rate float64, timeout int64) int {
	hi := int((timeout + int64(time.Second) - 1) / int64(time.Second))
	hi = max(hi, 1)
	if rate <= 0 {
		return hi
	}
	s := int(float64(n+1)/rate + 0.999999)
	return min(max(s, 1), hi)
}

// sampleRate refreshes the release rate at most once a second.
func (a *Admitter) sampleRate(now int64) {
	c := a.released.Load()
	if a.rateAt == 0 {
		a.rateAt, a.rateN = now, c
		return
	}
	dt := now - a.rateAt
	if dt < int64(time.Second) {
		return
	}
	r := float64(c-a.rateN) / (float64(dt) / float64(time.Second))
	if a.rate == 0 {
		a.rate = r
	} else {
		a.rate = (a.rate + r) / 2
	}
	a.rateAt, a.rateN = now, c
}
