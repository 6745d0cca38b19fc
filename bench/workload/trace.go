package workload

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kvca/kvca/bench/mock"
)

// TraceRecord is one line of a Mooncake-format trace.
type TraceRecord struct {
	Timestamp    float64 `json:"timestamp"` // ms from the start
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"` // one per trace block; equal ids are equal content
}

// ReadTrace parses a JSONL trace and returns its records in arrival order.
func ReadTrace(r io.Reader) ([]TraceRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	var recs []TraceRecord
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var rec TraceRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("trace line %d: %w", line, err)
		}
		if rec.InputLength < 0 || rec.OutputLength < 0 || rec.Timestamp < 0 || math.IsNaN(rec.Timestamp) {
			return nil, fmt.Errorf("trace line %d: negative or invalid field", line)
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Timestamp < recs[j].Timestamp })
	return recs, nil
}

// TraceOptions controls how a trace becomes requests.
type TraceOptions struct {
	Model       string  // default "mock"
	BlockTokens int     // tokens per trace block; default 512 (Mooncake)
	MaxRequests int     // keep the first N arrivals; 0: all
	TimeScale   float64 // multiplies timestamps (0.1 replays 10× faster); default 1
	// Plain sends every request as one user message, without reconstructing
	// conversations.
	Plain bool
	// MaxOutputTokens caps output_length (0: no cap), to shorten replays.
	MaxOutputTokens int
	NoStream        bool
}

func (o *TraceOptions) defaults() {
	if o.Model == "" {
		o.Model = "mock"
	}
	if o.BlockTokens <= 0 {
		o.BlockTokens = 512
	}
	if o.TimeScale <= 0 {
		o.TimeScale = 1
	}
}

// LoadTrace reads a trace file and builds its workload.
func LoadTrace(path string, opt TraceOptions) (*Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := ReadTrace(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	w := FromTrace(recs, opt)
	w.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	return w, nil
}

// FromTrace turns trace records into requests.
//
// Conversations are reconstructed the way a client sends them. A request's
// last block is usually partial, and its next turn's block at that position
// has a new id (it holds the old partial tokens plus the answer and the new
// question), so "extends" is judged on complete blocks: request c is a
// follow-up of an earlier request p when p's complete blocks are a prefix of
// c's ids, c is longer, and p's complete blocks include at least one block
// that p itself introduced (was not seen before p), and the trace shows at
// most maxFanout different continuations of those blocks. The last two rules
// keep a short request that only shares a common system prompt from
// adopting every later conversation as its own. Among candidates the longest match wins,
// then the latest. A follow-up is sent as its parent's messages, an
// assistant message and a new user message; the new text is the request's
// own block text from the parent's length on. Block text is deterministic in
// the block id, mock.BytesPerToken bytes a token, so equal ids give equal
// bytes and the mock engine counts about input_length tokens.
func FromTrace(recs []TraceRecord, opt TraceOptions) *Workload {
	opt.defaults()
	if opt.MaxRequests > 0 && len(recs) > opt.MaxRequests {
		recs = recs[:opt.MaxRequests]
	}
	w := &Workload{Name: "trace", Requests: make([]Request, len(recs)), HasTraceIdeal: true}
	w.TraceIdeal = TraceIdeal(recs, opt.BlockTokens)

	type convo struct {
		msgs    []message
		session int
		turn    int
		length  int // tokens of content so far
	}
	convos := make([]convo, len(recs))
	// fullIndex maps a prefix key of complete blocks to the latest request
	// that may parent requests extending it.
	fullIndex := map[uint64]int{}
	seen := map[uint64]struct{}{}
	fanout := branching(recs)
	var tokens []byte
	sessions := 0
	for i, r := range recs {
		bt := opt.BlockTokens
		keys := prefixKeys(r.HashIDs)
		parent := -1
		if !opt.Plain {
			for k := len(keys); k > 0; k-- {
				if p, ok := fullIndex[keys[k-1]]; ok && recs[p].InputLength+1 < r.InputLength {
					parent = p
					break
				}
			}
		}
		tokens = appendTraceText(tokens[:0], r, bt, i)
		out := r.OutputLength
		if opt.MaxOutputTokens > 0 && out > opt.MaxOutputTokens {
			out = opt.MaxOutputTokens
		}
		out = max(out, 1)
		c := &convos[i]
		if parent < 0 {
			c.session, c.turn = sessions, 0
			sessions++
			c.msgs = []message{{role: "user", content: append([]byte(nil), tokens...)}}
		} else {
			p := &convos[parent]
			c.session, c.turn = p.session, p.turn+1
			start := p.length * mock.BytesPerToken
			fresh := tokens[start : r.InputLength*mock.BytesPerToken]
			delta := r.InputLength - p.length
			answer := min(max(recs[parent].OutputLength, 1), delta/2)
			c.msgs = make([]message, len(p.msgs), len(p.msgs)+2)
			copy(c.msgs, p.msgs)
			c.msgs = append(c.msgs,
				message{role: "assistant", content: append([]byte(nil), fresh[:answer*mock.BytesPerToken]...)},
				message{role: "user", content: append([]byte(nil), fresh[answer*mock.BytesPerToken:]...)})
		}
		c.length = r.InputLength
		w.Requests[i] = Request{
			At:           time.Duration(r.Timestamp * opt.TimeScale * float64(time.Millisecond)),
			Session:      c.session,
			Turn:         c.turn,
			Path:         mock.PathChat,
			Body:         chatBody(nil, opt.Model, "", c.msgs, out, !opt.NoStream),
			Stream:       !opt.NoStream,
			OutputTokens: out,
		}
		// Register r as a possible parent if its complete blocks include a
		// block it introduced.
		full := len(r.HashIDs)
		if r.InputLength < full*bt {
			full-- // last block partial
		}
		introduced := 0
		for introduced < len(keys) {
			if _, ok := seen[keys[introduced]]; !ok {
				break
			}
			introduced++
		}
		if full > 0 && full > introduced && fanout[keys[full-1]] <= maxFanout {
			fullIndex[keys[full-1]] = i
		}
		for _, k := range keys {
			seen[k] = struct{}{}
		}
	}
	return w
}

// maxFanout is how many different blocks may follow a prefix for it to still
// be one conversation's history (a few regenerated or branched turns) rather
// than a prompt shared by unrelated conversations.
const maxFanout = 8

// branching counts, for each prefix key, the distinct ids that follow it
// anywhere in the trace.
func branching(recs []TraceRecord) map[uint64]int {
	type edge struct{ key, next uint64 }
	edges := map[edge]struct{}{}
	out := map[uint64]int{}
	for _, r := range recs {
		keys := prefixKeys(r.HashIDs)
		for i := 0; i+1 < len(keys); i++ {
			e := edge{keys[i], keys[i+1]}
			if _, ok := edges[e]; !ok {
				edges[e] = struct{}{}
				out[keys[i]]++
			}
		}
	}
	return out
}

// appendTraceText appends a request's content: each block's deterministic
// text, block i holding tokens [bt*i, bt*(i+1)) of input_length and the last
// block the rest. A request without ids gets text of its own.
func appendTraceText(dst []byte, r TraceRecord, bt, index int) []byte {
	if len(r.HashIDs) == 0 {
		src := newTextSource(^uint64(index))
		return src.appendTokens(dst, r.InputLength)
	}
	left := r.InputLength
	for i, id := range r.HashIDs {
		n := min(bt, left)
		if i == len(r.HashIDs)-1 {
			n = left
		}
		src := newTextSource(uint64(id))
		dst = src.appendTokens(dst, n)
		left -= n
	}
	return dst
}

// prefixKeys returns, for each block, a key for the id sequence up to and
// including it: equal keys mean equal prefixes (ids need not be chained).
func prefixKeys(ids []int64) []uint64 {
	keys := make([]uint64, len(ids))
	var h uint64 = 0xcbf29ce484222325
	for i, id := range ids {
		x := uint64(id)
		for b := 0; b < 8; b++ {
			h ^= x & 0xff
			h *= 0x100000001b3
			x >>= 8
		}
		keys[i] = h
	}
	return keys
}

// TraceIdeal is the hit rate of an infinite cache on one engine in the
// trace's own units: a block hits only if its whole prefix was seen before,
// weighted by its tokens (bt each, the last block the remainder).
func TraceIdeal(recs []TraceRecord, bt int) HitRate {
	var h HitRate
	seen := map[uint64]struct{}{}
	for _, r := range recs {
		left := r.InputLength
		hit := true
		for i, k := range prefixKeys(r.HashIDs) {
			n := min(bt, left)
			if i == len(r.HashIDs)-1 {
				n = left
			}
			left -= n
			if _, ok := seen[k]; ok && hit {
				h.HitTokens += int64(n)
			} else {
				hit = false
			}
			seen[k] = struct{}{}
			h.QueryTokens += int64(n)
		}
		h.QueryTokens += int64(left) // tokens without ids
	}
	return h
}
