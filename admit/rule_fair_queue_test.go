package admit

import "testing"

func TestRuleFairQueueOrder(t *testing.T) {
	tk := func(vstart int64, order uint64) *Ticket { return &Ticket{vstart: vstart, order: order} }
	for _, c := range []struct {
		name string
		x, y *Ticket
		want bool
	}{
		{"smaller tag", tk(1, 9), tk(2, 1), true},
		{"larger tag", tk(3, 1), tk(2, 9), false},
		{"equal tags: earlier arrival", tk(2, 1), tk(2, 2), true},
		{"equal tags: later arrival", tk(2, 2), tk(2, 1), false},
		{"anyone before nobody", tk(9, 9), nil, true},
	} {
		if got := before(c.x, c.y); got != c.want {
			t.Errorf("%s: before = %v, want %v", c.name, got, c.want)
		}
	}
}

// Tags: a backlogged tenant's requests are one apart; a tenant that
// starts waiting starts at the class's virtual time.
func TestRuleFairQueueTags(t *testing.T) {
	var q classQueue
	flood, light := &flow{}, &flow{}
	var got []int64
	for range 3 {
		x := &Ticket{}
		q.tag(flood, x)
		got = append(got, x.vstart)
	}
	q.vt = 2 // the flood's first two were served
	x := &Ticket{}
	q.tag(light, x)
	got = append(got, x.vstart)
	want := []int64{0, 1, 2, 2}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("tags %v, want %v", got, want)
		}
	}
}
