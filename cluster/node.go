package cluster

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dchest/siphash"
	"github.com/nats-io/nats.go"

	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/sched"
)

// ErrNoHashKey is why a replica without --hash-key may not join: each
// would draw its own random key, and no block hash would mean the same
// thing on two replicas.
var ErrNoHashKey = errors.New("clustering needs an explicit --hash-key (32 hex digits) shared by every replica; without one each replica draws a random key and their block hashes never agree")

// Node is one replica's membership in the cluster; it implements
// edge.Peer.
type Node struct {
	o     Options
	log   *slog.Logger
	table *chain.Table
	// v is the backends in force; a reload of the server's backends
	// replaces it (refresh).
	v   atomic.Pointer[view]
	srv *edge.Server
	id  uint64
	fp  uint32

	nc      *nats.Conn
	sub     *nats.Subscription
	subjLoc string
	subjLd  string
	subjRst string

	buf    *learnBuf
	dd     *dedup
	floors []atomic.Int64 // wall ms of each backend's latest known reset
	peers  *peerLoads
	resets chan resetReq
	kick   chan struct{}
	urgent chan struct{}
	m      *nodeMetrics

	livePeers atomic.Int32
	aggMu     sync.Mutex // orders SetRemoteLoad calls from receive and tick
	aggAct    []uint32
	aggPre    []uint32

	// Receive-side scratch: the subscription delivers on one goroutine.
	scratch  []uint64
	loadEnts []loadEntry
	warned   atomic.Bool
	lagMu    sync.Mutex // the histogram has no mean; Stats reports one
	lagSum   float64
	lagN     uint64

	closed    atomic.Bool
	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// view maps the server's backends to wire keys and back.
type view struct {
	backs []*sched.Backend
	keys  []uint64       // local backend index → wire key
	index map[uint64]int // wire key → local backend index (configured ones)
}

// refresh takes the server's backends in force. A removed backend's slot
// keeps its key (its last requests may still report what they learned)
// but peers' messages about that backend no longer land there.
func (n *Node) refresh() {
	backs := n.srv.Scheduler().Backends
	v := &view{backs: backs, keys: make([]uint64, len(backs)), index: make(map[uint64]int, len(backs))}
	for i, b := range backs {
		k := backendKey(edge.EndpointID(b.URL))
		v.keys[i] = k
		if _, dup := v.index[k]; !dup && !b.Retired() {
			v.index[k] = i
		}
	}
	n.v.Store(v)
}

// key is slot i's wire key; false for a slot this view does not know yet.
func (v *view) key(i int) (uint64, bool) {
	if i < 0 || i >= len(v.keys) {
		return 0, false
	}
	return v.keys[i], true
}

type resetReq struct {
	backend int
	at      int64 // wall ms
}

// Join connects srv to the cluster described by o: it installs the node as
// srv's peer and adds its metrics to the server's /metrics on the admin
// listener, so it must be called after edge.New and before srv.Start. NATS
// need not be reachable yet: the node connects in the background. Close
// it after srv has shut down.
func Join(srv *edge.Server, o Options) (*Node, error) {
	cfg := srv.Config()
	if cfg.Table.HashKey == "" {
		return nil, ErrNoHashKey
	}
	if err := o.defaults(srv.Table().TTL()); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	n := &Node{
		o:      o,
		log:    log,
		table:  srv.Table(),
		srv:    srv,
		id:     randomID(),
		fp:     fingerprint(srv.Key(), cfg),
		buf:    newLearnBuf(o.MaxPendingBlocks),
		dd:     newDedup(o.DedupEntries),
		floors: make([]atomic.Int64, chain.MaxBackends),
		peers:  newPeerLoads(chain.MaxBackends),
		resets: make(chan resetReq, 256),
		kick:   make(chan struct{}, 1),
		urgent: make(chan struct{}, 1),
		aggAct: make([]uint32, chain.MaxBackends),
		aggPre: make([]uint32, chain.MaxBackends),
		stop:   make(chan struct{}),
	}
	n.refresh()
	srv.OnBackends(n.refresh)
	base := o.subjectBase()
	n.subjLoc, n.subjLd, n.subjRst = base+".loc", base+".load", base+".reset"
	n.m = newNodeMetrics(n)

	nc, err := n.connect()
	if err != nil {
		return nil, fmt.Errorf("cluster: NATS %s: %w", o.URL, err)
	}
	n.nc = nc
	sub, err := n.subscribe(base+".*", n.receive)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("cluster: subscribe %s.*: %w", base, err)
	}
	n.sub = sub

	srv.SetPeer(n)
	srv.AddMetrics(n.m.set.WritePrometheus)
	n.wg.Add(2)
	go func() { defer n.wg.Done(); n.flushLoop() }()
	go func() { defer n.wg.Done(); n.loadLoop() }()
	log.Info("cluster: joined", "nats", o.URL, "subject", base, "node", n.idString(), "backends", len(n.v.Load().backs))
	return n, nil
}

// Close publishes what is pending, leaves the cluster and forgets the
// others' load. Call it after the server stopped serving.
func (n *Node) Close() {
	n.closeOnce.Do(func() {
		n.closed.Store(true)
		close(n.stop)
		n.wg.Wait()
		if n.nc.IsConnected() {
			_ = n.nc.FlushTimeout(time.Second)
		}
		n.nc.Close()
		for _, b := range n.v.Load().backs {
			b.SetRemoteLoad(0, 0)
		}
	})
}

// Learned implements edge.Peer: on the request path, so it only copies the
// chain into the bounded buffer and maybe wakes the publisher.
func (n *Node) Learned(chain []uint64, backend int, at int64) {
	if len(chain) == 0 || n.closed.Load() {
		return
	}
	ok, pending := n.buf.add(chain, backend, at)
	if !ok {
		n.m.dropped[dropBufferFull].Inc()
		return
	}
	if pending == len(chain) {
		wake(n.kick) // first since the last flush: publish at once
	} else if half := n.o.MaxPendingBlocks / 2; pending >= half && pending-len(chain) < half {
		wake(n.urgent)
	}
}

// Reset implements edge.Peer: backend lost its cache.
func (n *Node) Reset(backend int, gen uint32) {
	at := time.Now().UnixMilli()
	raiseFloor(&n.floors[backend], at)
	select {
	case n.resets <- resetReq{backend: backend, at: at}:
		wake(n.kick)
	default:
		n.m.dropped[dropPublish].Inc()
	}
}

// subscribe bounds what waits for this replica to apply it (beyond, NATS
// drops and we count slow_consumer) and returns once the server knows of
// the subscription, so a peer's message published after that reaches it.
func (n *Node) subscribe(subj string, cb nats.MsgHandler) (*nats.Subscription, error) {
	sub, err := n.nc.Subscribe(subj, cb)
	if err != nil {
		return nil, err
	}
	_ = sub.SetPendingLimits(65536, 64<<20)
	if n.nc.IsConnected() {
		_ = n.nc.FlushTimeout(time.Second)
	}
	return sub, nil
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// raiseFloor moves f up to at; it reports false when f was already there.
func raiseFloor(f *atomic.Int64, at int64) bool {
	for {
		cur := f.Load()
		if at <= cur {
			return false
		}
		if f.CompareAndSwap(cur, at) {
			return true
		}
	}
}

func (n *Node) idString() string { return strconv.FormatUint(n.id, 16) }

func randomID() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("cluster: no system randomness: " + err.Error())
	}
	return binary.LittleEndian.Uint64(b[:]) | 1
}

// fingerprint digests what must agree for block hashes to be shared. It is
// a MAC under the hash key, so it reveals nothing about the key.
func fingerprint(k chain.Key, cfg edge.Config) uint32 {
	ex := append([]string(nil), cfg.Table.CBRExclude...)
	sort.Strings(ex)
	b := []byte("kvca-cluster-v1\x00" + strconv.Itoa(cfg.Table.BlockSize))
	for _, e := range ex {
		b = append(b, 0)
		b = append(b, e...)
	}
	return uint32(siphash.Hash(k.K0, k.K1, b))
}

// ID is this node's sender id on the wire.
func (n *Node) ID() uint64 { return n.id }

// Connected reports whether the NATS connection is up.
func (n *Node) Connected() bool { return n.nc.IsConnected() }

// LivePeers is how many other replicas published load recently.
func (n *Node) LivePeers() int { return int(n.livePeers.Load()) }
