package cluster

import (
	"context"
	"testing"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/internal/testkit"
)

// Replicas whose backends change at run time keep sharing: a backend added
// on both, in a different slot on each, has its locations applied to the
// right slot, and a removed backend's locations are no longer applied.
func TestReloadedBackendsStayShared(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, 2, true)
	a, b := f.replicas[0], f.replicas[1]
	e0, e1, e2 := f.engines[0].URL(), f.engines[1].URL(), f.engines[2].URL()
	// a serves e0 e1 e2 in slots 0 1 2; b drops e0 and then takes e2,
	// which lands in e0's freed slot.
	if _, err := a.srv.SetBackends([]string{e0, e1, e2}, "", -1); err != nil {
		t.Fatal(err)
	}
	before, err := a.srv.Warm(context.Background(), indexOf(a.srv, e0), canon.Chat, mock.PathChat, chatBody("before"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.srv.SetBackends([]string{e1}, "", -1); err != nil {
		t.Fatal(err)
	}
	// Removing e0 from b's configuration is no news of e0's cache: b
	// tells nobody to forget it, and a keeps what it learned there.
	if n := int(b.node.m.sent[kindReset].Get()) + len(b.node.resets); n != 0 {
		t.Fatalf("b sent %d resets for backends it only stopped using", n)
	}
	if got := heldCount(a.srv, before, indexOf(a.srv, e0)); got != len(before) {
		t.Fatalf("a holds %d of %d blocks on e0 after b dropped e0", got, len(before))
	}
	if _, err := b.srv.SetBackends([]string{e1, e2}, "", -1); err != nil {
		t.Fatal(err)
	}
	ia, ib := indexOf(a.srv, e2), indexOf(b.srv, e2)
	if ia == ib {
		t.Fatalf("e2 in slot %d on both replicas; the test needs them to differ", ia)
	}
	ch, err := a.srv.Warm(context.Background(), ia, canon.Chat, mock.PathChat, chatBody("added"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitUntil(t, "b to learn a's locations on e2 in its own slot for e2", func() bool {
		return heldCount(b.srv, ch, ib) == len(ch)
	})
	// e0 is gone from b: what a learns on e0 is not applied anywhere on b.
	ch0, err := a.srv.Warm(context.Background(), indexOf(a.srv, e0), canon.Chat, mock.PathChat, chatBody("removed"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitUntil(t, "b to count a's locations on e0 as unknown", func() bool {
		return b.node.m.dropped[dropUnknown].Get() > 0
	})
	// Both chains share the system prompt's blocks, which e2 holds.
	k := 0
	for k < len(ch) && k < len(ch0) && ch[k] == ch0[k] {
		k++
	}
	if k == len(ch0) {
		t.Fatal("the chains do not diverge")
	}
	for _, be := range b.srv.Scheduler().Backends {
		if got := heldCount(b.srv, ch0[k:], be.Index); got != 0 {
			t.Fatalf("b holds %d blocks of e0's own chain on slot %d (%s)", got, be.Index, be.URL)
		}
	}
}
