// Package tick runs the background loops that do one thing at a fixed
// period.
package tick

import "time"

// Every calls f every d, the first time d after the call, until done is
// closed (a context's Done channel, or a stop channel); it returns then,
// after any call of f under way. Ticks missed while f runs are dropped,
// as with time.Ticker.
func Every(done <-chan struct{}, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			// A tick and done ready at once: select picks either, and f
			// must not run once done is closed.
			select {
			case <-done:
				return
			default:
			}
			f()
		}
	}
}
