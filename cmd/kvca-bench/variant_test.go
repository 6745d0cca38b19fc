package main

import "testing"

func TestPolicyVariant(t *testing.T) {
	for _, c := range []struct {
		in            string
		name          string
		eps           float64
		offTel, offCh bool
		bad           bool
	}{
		{in: "kvca-cost", name: "kvca-cost", eps: 0.5},
		{in: "kvca-cost/no-telemetry/no-check", name: "kvca-cost", eps: 0.5, offTel: true, offCh: true},
		{in: "kvca/no-check/eps=-1", name: "kvca", eps: -1, offCh: true},
		{in: "cost/eps=0.25/no-telemetry", name: "cost", eps: 0.25, offTel: true},
		{in: "kvca/eps=x", bad: true},
		{in: "kvca/no-such", bad: true},
	} {
		name, eps, offTel, offCh, err := policyVariant(c.in, 0.5)
		if (err != nil) != c.bad {
			t.Fatalf("%s: err %v", c.in, err)
		}
		if !c.bad && (name != c.name || eps != c.eps || offTel != c.offTel || offCh != c.offCh) {
			t.Fatalf("%s: %s %v %v %v", c.in, name, eps, offTel, offCh)
		}
	}
}
