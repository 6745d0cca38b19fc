package cluster

import (
	"reflect"
	"testing"
)

type rec struct {
	key    uint64
	at     int64
	hashes []uint64
}

func TestLocationsRoundTrip(t *testing.T) {
	lb := newLocBatch(4)
	lb.add(2, 0xaaaa, 1_700_000_000_500, []uint64{1, 2, 3})
	lb.add(0, 0xbbbb, 1_700_000_000_400, []uint64{^uint64(0)}) // earlier than base
	lb.add(2, 0xaaaa, 1_700_000_000_600, []uint64{4})
	h := header{fingerprint: 7, sender: 99}
	msg := lb.encode(nil, h)
	// 14 header, 1 + 2 keys×8, 6 base, records of index+delta+count
	// (3, 4 and 4 bytes: ±100 ms take two) and 8 bytes a hash.
	if want := 14 + 1 + 16 + 6 + 3 + 4 + 4 + 5*8; len(msg) != want {
		t.Errorf("encoded %d bytes, want %d", len(msg), want)
	}
	got, err := decodeAll(t, msg, h)
	if err != nil {
		t.Fatal(err)
	}
	want := []rec{{0xaaaa, 1_700_000_000_500, []uint64{1, 2, 3}}, {0xbbbb, 1_700_000_000_400, []uint64{^uint64(0)}}, {0xaaaa, 1_700_000_000_600, []uint64{4}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	lb.reset()
	if !lb.empty() || lb.blocks != 0 || len(lb.keys) != 0 {
		t.Fatal("reset kept state")
	}
}

func decodeAll(t *testing.T, msg []byte, want header) ([]rec, error) {
	h, body, err := parseHeader(msg)
	if err != nil {
		return nil, err
	}
	if h.kind != kindLocations || h.fingerprint != want.fingerprint || h.sender != want.sender {
		t.Fatalf("header %+v", h)
	}
	var out []rec
	var scratch []uint64
	err = decodeLocations(body, &scratch, func(k uint64, at int64, hs []uint64) {
		out = append(out, rec{k, at, append([]uint64(nil), hs...)})
	})
	return out, err
}

func TestTruncatedAndHostileMessagesAreRejected(t *testing.T) {
	lb := newLocBatch(1)
	lb.add(0, 1, 1000, []uint64{1, 2, 3, 4})
	msg := lb.encode(nil, header{sender: 1})
	for cut := 0; cut < len(msg); cut++ {
		h, body, err := parseHeader(msg[:cut])
		if err != nil {
			continue
		}
		var scratch []uint64
		n := 0
		err = decodeLocations(body, &scratch, func(uint64, int64, []uint64) { n++ })
		if err == nil && cut < len(msg) && n > 0 {
			t.Fatalf("cut at %d of %d: a partial record was delivered (kind %d)", cut, len(msg), h.kind)
		}
	}
	// A record claiming 2^60 hashes must fail without allocating them.
	hostile := appendHeader(nil, header{kind: kindLocations})
	hostile = append(hostile, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0xe8, 0x07, 0, 0)
	hostile = append(hostile, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f)
	_, body, _ := parseHeader(hostile)
	var scratch []uint64
	if err := decodeLocations(body, &scratch, func(uint64, int64, []uint64) {}); err == nil {
		t.Fatal("hostile count accepted")
	}
	if _, _, err := parseHeader([]byte{9, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}); err == nil {
		t.Fatal("unknown version accepted")
	}
}

func TestLoadAndResetRoundTrip(t *testing.T) {
	ents := []loadEntry{{key: 5, active: 3, prefill: 700}, {key: 6, active: 1 << 20}}
	msg := appendLoad(nil, header{sender: 4}, 1234, 200, ents)
	if want := 14 + 2 + 2 + 1 + (8 + 1 + 2) + (8 + 3 + 1); len(msg) != want {
		t.Errorf("load message %d bytes, want %d", len(msg), want)
	}
	h, body, err := parseHeader(msg)
	if err != nil || h.kind != kindLoad {
		t.Fatalf("header %+v %v", h, err)
	}
	at, iv, got, err := decodeLoad(body, nil)
	if err != nil || at != 1234 || iv != 200 || !reflect.DeepEqual(got, ents) {
		t.Fatalf("decoded %d %d %+v %v", at, iv, got, err)
	}
	msg = appendReset(nil, header{sender: 4}, 77, 99999)
	_, body, _ = parseHeader(msg)
	if k, at, err := decodeReset(body); k != 77 || at != 99999 || err != nil {
		t.Fatalf("reset %d %d %v", k, at, err)
	}
	if _, _, err := decodeReset(body[:5]); err == nil {
		t.Fatal("truncated reset accepted")
	}
}
