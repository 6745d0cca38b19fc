package edge

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvca/kvca/internal/testkit"
)

// A recording mock of a disaggregated fleet's workers, for both
// protocols. Every request a worker receives is recorded in one sequence
// shared by the fleet (so a test sees which leg came first); faults are
// switched on per worker. With SGLang the two legs of a pair meet at
// their bootstrap room as the engines' do: the prefill worker answers only
// once the room's decode leg has arrived, and the decode worker decodes
// only once the prefill worker has handed the KV cache over, so legs sent
// one after the other (or a decode leg alone) would hang.

// pdEvent is one request a worker received.
type pdEvent struct {
	seq       int
	worker    string
	path      string
	rid       string
	raw       []byte
	body      map[string]any
	cancelled bool // its client left before the answer ended
	answered  int  // the status answered (0: none)
}

// pdRoom is a bootstrap room where an SGLang pair meets.
type pdRoom struct {
	prefill, decode, kv chan struct{}
	onceP, onceD, onceK sync.Once
}

// pdRec is the fleet's record.
type pdRec struct {
	mu     sync.Mutex
	events []*pdEvent
	rooms  map[string]*pdRoom
}

func (r *pdRec) add(e *pdEvent) {
	r.mu.Lock()
	e.seq = len(r.events)
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *pdRec) update(f func()) {
	r.mu.Lock()
	f()
	r.mu.Unlock()
}

// all returns copies of the events so far.
func (r *pdRec) all() []pdEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]pdEvent, len(r.events))
	for i, e := range r.events {
		out[i] = *e
	}
	return out
}

// of returns the events of worker w.
func (r *pdRec) of(w *pdWorker) []pdEvent {
	var out []pdEvent
	for _, e := range r.all() {
		if e.worker == w.name {
			out = append(out, e)
		}
	}
	return out
}

func (r *pdRec) room(id string) *pdRoom {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rooms == nil {
		r.rooms = map[string]*pdRoom{}
	}
	rm := r.rooms[id]
	if rm == nil {
		rm = &pdRoom{prefill: make(chan struct{}), decode: make(chan struct{}), kv: make(chan struct{})}
		r.rooms[id] = rm
	}
	return rm
}

// pdWorker is one engine of the mock fleet.
type pdWorker struct {
	name   string
	role   string // prefill, decode, both
	sglang bool
	rec    *pdRec
	ln     net.Listener
	srv    *http.Server
	// Faults: status answers it instead of the work; drop closes the
	// connection at once; hold holds every answer until released or
	// the client leaves.
	status atomic.Int32
	drop   atomic.Bool
	// pairedFail: with SGLang, a fault (status, drop) strikes only once
	// the room's other leg has arrived (a worker failing after the pair
	// met, so that the test sees both legs).
	pairedFail atomic.Bool
	// earlyHead: with SGLang, a streamed decode leg sends its head and a
	// first event at once, before the KV cache has come (so that its
	// answer has begun when the pair breaks).
	earlyHead atomic.Bool
	hold      atomic.Pointer[chan struct{}]
	// holdFirst: a streamed answer sends its head at once and its first
	// event only once released (a prefilling engine).
	holdFirst chan struct{}
}

// pdWait bounds every wait of the mock: a test that hangs fails on its
// own deadline, never on this one's passing.
const pdWait = 20 * time.Second

func newPDWorker(t *testing.T, rec *pdRec, name, role string, sglang bool) *pdWorker {
	t.Helper()
	w := &pdWorker{name: name, role: role, sglang: sglang, rec: rec, ln: listenLocal(t)}
	w.srv = &http.Server{Handler: w}
	go func() { _ = w.srv.Serve(w.ln) }()
	t.Cleanup(w.close)
	return w
}

// holdAnswers holds the worker's answers until the returned release.
func (w *pdWorker) holdAnswers() (release func()) {
	ch := make(chan struct{})
	w.hold.Store(&ch)
	return func() {
		w.hold.Store(nil)
		close(ch)
	}
}

func (w *pdWorker) url() string    { return "http://" + w.ln.Addr().String() }
func (w *pdWorker) host() string   { return w.ln.Addr().(*net.TCPAddr).IP.String() }
func (w *pdWorker) close()         { _ = w.srv.Close() }
func (w *pdWorker) spec() string   { return w.url() + "#role=" + w.role }
func (w *pdWorker) String() string { return w.name }

func (w *pdWorker) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		io.WriteString(rw, "ok")
		return
	case "/v1/models":
		io.WriteString(rw, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	e := &pdEvent{worker: w.name, path: r.URL.Path, rid: r.Header.Get("X-Request-Id"), raw: raw}
	_ = json.Unmarshal(raw, &e.body)
	w.rec.add(e)
	answered := func(st int) { w.rec.update(func() { e.answered = st }) }
	gone := func() bool {
		select {
		case <-r.Context().Done():
			w.rec.update(func() { e.cancelled = true })
			return true
		default:
			return false
		}
	}
	if (w.drop.Load() || w.status.Load() != 0) && w.pairedFail.Load() && w.sglang && e.body["bootstrap_room"] != nil {
		// Waits for the other leg without telling it this one came: a
		// failing worker does no part of the pair's work.
		rm := w.rec.room(fmt.Sprint(e.body["bootstrap_room"]))
		other := rm.prefill
		if isPrefillLeg(e.body, w.sglang, w.role) {
			other = rm.decode
		}
		select {
		case <-other:
		case <-r.Context().Done():
			gone()
			return
		case <-time.After(pdWait):
		}
	}
	if w.drop.Load() {
		hijack(rw)
		return
	}
	if st := int(w.status.Load()); st != 0 {
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(st)
		io.WriteString(rw, `{"error":{"message":"worker says no","type":"server_error"}}`)
		answered(st)
		return
	}
	if hold := w.hold.Load(); hold != nil {
		select {
		case <-*hold:
		case <-r.Context().Done():
			gone()
			return
		case <-time.After(pdWait):
		}
	}
	prefill := isPrefillLeg(e.body, w.sglang, w.role)
	if w.sglang && e.body["bootstrap_room"] != nil {
		rm := w.rec.room(fmt.Sprint(e.body["bootstrap_room"]))
		if prefill {
			rm.onceP.Do(func() { close(rm.prefill) })
			select {
			case <-rm.decode:
			case <-r.Context().Done():
				gone()
				return
			case <-time.After(pdWait):
				return
			}
			rm.onceK.Do(func() { close(rm.kv) })
		} else {
			rm.onceD.Do(func() { close(rm.decode) })
			if stream, _ := e.body["stream"].(bool); stream && w.earlyHead.Load() {
				rw.Header().Set("Content-Type", "text/event-stream")
				rw.WriteHeader(200)
				io.WriteString(rw, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"early \"}}]}\n\n")
				rw.(http.Flusher).Flush()
				answered(200)
			}
			select {
			case <-rm.kv:
			case <-r.Context().Done():
				gone()
				return
			case <-time.After(pdWait):
				return
			}
		}
	}
	rw.Header().Set("X-Backend", w.name)
	if prefill && !w.sglang {
		rw.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(rw, `{"id":"cmpl-%s","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"remote_decode"}],`+
			`"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11},`+
			`"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_engine_id":%q,"remote_block_ids":[1,2,3],"remote_host":%q,"remote_port":5600,"tp_size":1}}`,
			e.rid, w.name, w.host())
		answered(200)
		return
	}
	if stream, _ := e.body["stream"].(bool); stream {
		rw.Header().Set("Content-Type", "text/event-stream")
		rw.WriteHeader(200)
		rw.(http.Flusher).Flush()
		answered(200)
		if w.holdFirst != nil {
			select {
			case <-w.holdFirst:
			case <-r.Context().Done():
				gone()
				return
			case <-time.After(pdWait):
				return
			}
		}
		for i := range 3 {
			if _, err := fmt.Fprintf(rw, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"}}],\"backend\":%q}\n\n", i, w.name); err != nil {
				gone()
				return
			}
			rw.(http.Flusher).Flush()
		}
		io.WriteString(rw, "data: [DONE]\n\n")
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(rw, `{"id":"c-%s","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello from %s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}}`, e.rid, w.name)
	answered(200)
}

// isPrefillLeg: what the worker is asked to do. A vLLM prefill leg names
// a remote decode; an SGLang pair's legs carry the same body, and a worker
// of both roles is the pair's prefill worker when the body names it as
// the bootstrap server.
func isPrefillLeg(body map[string]any, sglang bool, role string) bool {
	if !sglang {
		kv, _ := body["kv_transfer_params"].(map[string]any)
		return kv != nil && kv["do_remote_decode"] == true
	}
	return role == "prefill"
}

func hijack(rw http.ResponseWriter) {
	if hj, ok := rw.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
		}
	}
}

// pdFleet is a proxy over prefill and decode workers of one protocol.
type pdFleet struct {
	s        *Server
	rec      *pdRec
	prefills []*pdWorker
	decodes  []*pdWorker
}

func startPD(t *testing.T, sglang bool, nP, nD int, mod func(*Config)) *pdFleet {
	t.Helper()
	f := &pdFleet{rec: &pdRec{}}
	for i := range nP {
		f.prefills = append(f.prefills, newPDWorker(t, f.rec, "p"+strconv.Itoa(i), "prefill", sglang))
	}
	for i := range nD {
		f.decodes = append(f.decodes, newPDWorker(t, f.rec, "d"+strconv.Itoa(i), "decode", sglang))
	}
	f.s = startProxy(t, func(c *Config) {
		for _, w := range append(append([]*pdWorker{}, f.prefills...), f.decodes...) {
			c.Backends = append(c.Backends, w.spec())
		}
		c.PD.Threshold = 0
		c.RouteHeader = true
		c.Retries = 2
		if sglang {
			c.PD.Protocol = ProtocolSGLang
		}
		if mod != nil {
			mod(c)
		}
	})
	return f
}

// chat posts a chat turn and returns the answer, its body and its route.
func (f *pdFleet) chat(t *testing.T, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+f.s.Addr()+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "rid-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// waitPDIdle waits until every backend's load and slots are back to zero
// and no prefill leg runs.
func waitPDIdle(t *testing.T, s *Server) {
	t.Helper()
	waitIdle(t, s)
	testkit.WaitUntil(t, "no prefill leg running", func() bool { return s.m.pd.running.Load() == 0 })
	waitIdle(t, s)
}
