package chain

import (
	"sync"
	"sync/atomic"
)

// DefaultBytesPerToken is the CBR bytes per prompt token assumed until a
// model is calibrated: English text under the usual BPE vocabularies runs
// at about four characters per token, and the CBR adds little (roles, a
// few separators) to the text it carries.
const DefaultBytesPerToken = 4.0

// CalibrateMinTokens is how many prompt tokens of a model must be observed
// before its own ratio replaces the fleet's (or the default).
const CalibrateMinTokens = 8192

// Observations whose ratio falls outside these bounds (an image's few
// tokens for a long base64 string, a broken usage field) are ignored.
const (
	minBytesPerToken = 0.25
	maxBytesPerToken = 64
)

// Calibrator learns, per model and with no tokenizer, how many CBR bytes
// make a prompt token: answers report usage.prompt_tokens, and the proxy
// knows the length of the CBR it computed for the same request. Capacity
// in tokens (what engines report) converts to CBR blocks with it. Safe for
// concurrent use; Observe of a model already seen takes a shared lock and
// two atomic adds, and allocates nothing.
type Calibrator struct {
	def    float64
	mu     sync.RWMutex
	models map[string]*calib
	all    calib
}

type calib struct{ bytes, tokens atomic.Uint64 }

func (c *calib) ratio() (float64, bool) {
	t := c.tokens.Load()
	if t < CalibrateMinTokens {
		return 0, false
	}
	return float64(c.bytes.Load()) / float64(t), true
}

// NewCalibrator returns a calibrator that answers def until it has seen
// enough (def <= 0: DefaultBytesPerToken).
func NewCalibrator(def float64) *Calibrator {
	if def <= 0 {
		def = DefaultBytesPerToken
	}
	return &Calibrator{def: def, models: map[string]*calib{}}
}

// Observe records that a request of model whose CBR was cbrBytes long was
// counted as promptTokens by the engine.
func (c *Calibrator) Observe(model string, cbrBytes, promptTokens int) {
	if !plausible(cbrBytes, promptTokens) {
		return
	}
	c.mu.RLock()
	m := c.models[model]
	c.mu.RUnlock()
	if m == nil {
		c.mu.Lock()
		if m = c.models[model]; m == nil {
			m = &calib{}
			c.models[model] = m
		}
		c.mu.Unlock()
	}
	c.add(m, cbrBytes, promptTokens)
}

// ObserveBytes is Observe for a model name in bytes (as canon gives it):
// no allocation once the model is known.
func (c *Calibrator) ObserveBytes(model []byte, cbrBytes, promptTokens int) {
	if !plausible(cbrBytes, promptTokens) {
		return // before the name's conversion: a ratio never kept allocates nothing
	}
	c.mu.RLock()
	m := c.models[string(model)]
	c.mu.RUnlock()
	if m == nil {
		c.Observe(string(model), cbrBytes, promptTokens)
		return
	}
	c.add(m, cbrBytes, promptTokens)
}

// plausible reports whether a request's CBR bytes and prompt tokens make
// a ratio worth learning.
func plausible(cbrBytes, promptTokens int) bool {
	if cbrBytes <= 0 || promptTokens <= 0 {
		return false
	}
	r := float64(cbrBytes) / float64(promptTokens)
	return r >= minBytesPerToken && r <= maxBytesPerToken
}

func (c *Calibrator) add(m *calib, cbrBytes, promptTokens int) {
	m.bytes.Add(uint64(cbrBytes))
	m.tokens.Add(uint64(promptTokens))
	c.all.bytes.Add(uint64(cbrBytes))
	c.all.tokens.Add(uint64(promptTokens))
}

// BytesPerToken returns model's ratio, and whether it is calibrated: the
// model's own once it has CalibrateMinTokens, else every model's together,
// else the default.
func (c *Calibrator) BytesPerToken(model string) (float64, bool) {
	c.mu.RLock()
	m := c.models[model]
	c.mu.RUnlock()
	return c.ratioOf(m)
}

// BytesPerTokenOf is BytesPerToken for a model name in bytes, without
// allocating.
func (c *Calibrator) BytesPerTokenOf(model []byte) (float64, bool) {
	c.mu.RLock()
	m := c.models[string(model)]
	c.mu.RUnlock()
	return c.ratioOf(m)
}

func (c *Calibrator) ratioOf(m *calib) (float64, bool) {
	if m != nil {
		if r, ok := m.ratio(); ok {
			return r, true
		}
	}
	if r, ok := c.all.ratio(); ok {
		return r, true
	}
	return c.def, false
}

// Blocks converts a capacity in tokens of model to CBR blocks of
// blockSize bytes.
func (c *Calibrator) Blocks(model string, tokens int64, blockSize int) int {
	if tokens <= 0 || blockSize <= 0 {
		return 0
	}
	r, _ := c.BytesPerToken(model)
	return int(float64(tokens) * r / float64(blockSize))
}

// Ratios returns each observed model's ratio (calibrated or not yet: then
// the fallback BytesPerToken would answer), for the admin API.
func (c *Calibrator) Ratios() map[string]float64 {
	c.mu.RLock()
	names := make([]string, 0, len(c.models))
	for n := range c.models {
		names = append(names, n)
	}
	c.mu.RUnlock()
	out := make(map[string]float64, len(names))
	for _, n := range names {
		out[n], _ = c.BytesPerToken(n)
	}
	return out
}
