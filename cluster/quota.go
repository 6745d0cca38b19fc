package cluster

import (
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvca/kvca/quota"
)

// Tenant quotas are shared by exchanging usage: every interval each
// replica publishes, per tenant, the requests and tokens it charged since
// its last publication, and charges what the others publish to its own
// buckets. Each replica still admits on its own, so the fleet can admit
// more than a limit by what the other replicas admitted in the last
// interval plus delivery lag (docs/frontdoor.md gives the bound).
//
// The messages go to <subject>.<name>.quota.usage (one token deeper than
// the subscription of locations, load and resets, which never sees them):
//
//	header (kind 16) | n uvarint | n × (len u8 | tenant | requests varint | tokens varint)
const kindQuota = 16

// DefaultQuotaInterval is how often usage is published.
const DefaultQuotaInterval = 100 * time.Millisecond

// ShareQuota makes l one budget with the other replicas' limiters on the
// same subject and name. It returns a stop function that publishes what
// is pending and unsubscribes; call it before Close.
func (n *Node) ShareQuota(l *quota.Limiter, every time.Duration) (stop func(), err error) {
	if every <= 0 {
		every = DefaultQuotaInterval
	}
	subj := n.o.subjectBase() + ".quota.usage"
	sent := n.m.set.GetOrCreateCounter(`kvca_cluster_quota_messages_total{dir="sent"}`)
	recv := n.m.set.GetOrCreateCounter(`kvca_cluster_quota_messages_total{dir="received"}`)
	bad := n.m.set.GetOrCreateCounter(`kvca_cluster_quota_messages_total{dir="malformed"}`)
	unknown := n.m.set.GetOrCreateCounter(`kvca_cluster_quota_unknown_tenants_total`)
	dropped := n.m.set.GetOrCreateCounter(`kvca_cluster_quota_messages_total{dir="publish_error"}`)
	sub, err := n.subscribe(subj, func(msg *nats.Msg) {
		h, body, err := parseHeader(msg.Data)
		if err != nil || h.kind != kindQuota {
			bad.Inc()
			return
		}
		if h.sender == n.id {
			return
		}
		recv.Inc()
		if err := decodeQuota(body, func(tenant string, r, k int64) {
			if !l.ChargeRemote(tenant, r, k) {
				unknown.Inc()
			}
		}); err != nil {
			bad.Inc()
		}
	})
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var out []byte
		publish := func() {
			out = appendQuota(out[:0], n.header(), l, n.o.MaxMessageBytes, func(msg []byte) {
				if n.nc.Publish(subj, msg) != nil {
					dropped.Inc()
					return
				}
				sent.Inc()
			})
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				publish()
				return
			case <-t.C:
				publish()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			_ = sub.Unsubscribe()
		})
	}, nil
}

// appendQuota takes l's pending usage and hands it to emit as messages of
// at most max bytes (a tenant name is at most 64 bytes, so one always
// fits); it returns the buffer for reuse.
func appendQuota(buf []byte, h header, l *quota.Limiter, max int, emit func([]byte)) []byte {
	h.kind = kindQuota
	type ent struct {
		name string
		r, k int64
	}
	var ents []ent
	l.TakeUsage(func(tenant string, r, k int64) { ents = append(ents, ent{tenant, r, k}) })
	for len(ents) > 0 {
		buf = appendHeader(buf[:0], h)
		// Count first, so the message says how many entries it holds.
		size, cnt := len(buf)+binary.MaxVarintLen64, 0
		for _, e := range ents {
			sz := 1 + len(e.name) + 2*binary.MaxVarintLen64
			if cnt > 0 && size+sz > max {
				break
			}
			size += sz
			cnt++
		}
		buf = binary.AppendUvarint(buf, uint64(cnt))
		for _, e := range ents[:cnt] {
			buf = append(buf, byte(len(e.name)))
			buf = append(buf, e.name...)
			buf = binary.AppendVarint(buf, e.r)
			buf = binary.AppendVarint(buf, e.k)
		}
		emit(buf)
		ents = ents[cnt:]
	}
	return buf
}

var errQuotaMsg = errors.New("malformed quota message")

func decodeQuota(b []byte, f func(tenant string, r, k int64)) error {
	cnt, m := binary.Uvarint(b)
	if m <= 0 || cnt > uint64(len(b)) {
		return errQuotaMsg
	}
	b = b[m:]
	for range cnt {
		if len(b) < 1 || len(b) < 1+int(b[0]) || b[0] == 0 {
			return errQuotaMsg
		}
		name := string(b[1 : 1+int(b[0])])
		b = b[1+int(b[0]):]
		r, m1 := binary.Varint(b)
		if m1 <= 0 {
			return errQuotaMsg
		}
		k, m2 := binary.Varint(b[m1:])
		if m2 <= 0 {
			return errQuotaMsg
		}
		b = b[m1+m2:]
		f(name, r, k)
	}
	if len(b) != 0 {
		return errQuotaMsg
	}
	return nil
}
