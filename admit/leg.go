package admit

import (
	"sync/atomic"

	"github.com/kvca/kvca/chain"
)

// Leg is a slot a request holds for a second leg on another backend (the
// prefill leg of a disaggregated request, whose decode leg holds the
// request's Ticket). A leg never waits in the queue: it takes a free slot
// at once or goes without one (the request then runs another way, on the
// slot its ticket holds). The zero Leg holds nothing.
type Leg struct {
	slot atomic.Int32 // held backend + 1; 0: none
}

// Backend returns the backend whose slot l holds, or -1.
func (l *Leg) Backend() int { return int(l.slot.Load()) - 1 }

// Free returns the backends of elig with a free slot for class c, as the
// queue's own room rule sees them; every backend of elig without a limit.
func (a *Admitter) Free(elig *chain.Set, c Class) chain.Set {
	if !a.limited {
		return *elig
	}
	if c >= NumClasses {
		c = Normal
	}
	var room chain.Set
	a.addRoom(elig, &room, c)
	return room
}

// TakeLeg makes l hold a slot on b (releasing one it held elsewhere);
// false when b has no free slot.
func (a *Admitter) TakeLeg(l *Leg, b int) bool {
	if !a.limited || l.Backend() == b {
		return true
	}
	if b < 0 || b >= len(a.slots) || !a.slots[b].tryAcquire() {
		return false
	}
	if old := l.slot.Swap(int32(b + 1)); old != 0 {
		a.release(int(old - 1))
	}
	return true
}

// DoneLeg releases l's slot, exactly once however often it is called,
// passing it to the next waiter that can use it.
func (a *Admitter) DoneLeg(l *Leg) {
	if old := l.slot.Swap(0); old != 0 {
		a.release(int(old - 1))
	}
}

// Follow moves the slot t holds to b, where its request really went (a
// gateway retried it on another endpoint than the one picked), so that
// b's count says what b serves. The slot is taken on b over its limit if
// b has none free: the request is there whatever the limit says. A ticket
// that holds no slot takes none.
func (a *Admitter) Follow(t *Ticket, b int) {
	if !a.limited || b < 0 || b >= len(a.slots) {
		return
	}
	h := t.Backend()
	if h < 0 || h == b {
		return
	}
	a.slots[b].inflight.Add(1)
	if a.highPreempts(t) {
		a.slots[b].high.Add(1)
		a.slots[h].high.Add(-1)
	}
	if old := t.slot.Swap(int32(b + 1)); old != 0 {
		a.release(int(old - 1)) // the tenant's charge stays: the same request
	}
}
