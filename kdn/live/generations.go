package live

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/kdn"
	"github.com/kvca/kvca/sched"
)

// GenerationsFile is where endpoint generations persist, under --state-dir.
const GenerationsFile = "generations.json"

const generationsFormat = 1

type genFile struct {
	Format    int         `json:"format"`
	Endpoints []genRecord `json:"endpoints"` // by endpoint id
}

type genRecord struct {
	EndpointID string `json:"endpoint_id"`
	Name       string `json:"name"` // the backend URL the id derives from
	Generation uint32 `json:"generation"`
}

// generations keeps the highest generation each endpoint has had, so that
// one never comes back after a restart. The block table is not persisted:
// a restarted kvca cannot vouch for what any engine holds, so every
// endpoint starts one past its stored generation, and a generation a
// client held before the restart is stale after it.
//
// A generation is written before it is shown: every answer reads it
// through note, and resets are noted as they happen (Server.OnBackendReset),
// so the file is never behind what a client may have seen.
type generations struct {
	path string // "": not persisted, generations start at 1
	log  *slog.Logger

	mu  sync.Mutex
	ids []string // backend index → endpoint id ("" for a removed one)
	// recs also keeps endpoints no longer configured: a backend that
	// returns to the configuration continues past its old generations.
	recs map[string]genRecord
}

// openGenerations restores the stored generations of dir (empty: none)
// and starts each backend's table generation one past its stored one,
// then writes them back before anything is shown.
func openGenerations(dir string, t *chain.Table, backends []*sched.Backend, log *slog.Logger) (*generations, error) {
	gs := &generations{log: log, recs: map[string]genRecord{}}
	for _, b := range backends {
		gs.ids = append(gs.ids, kdn.EndpointIDForName(b.URL))
	}
	if dir == "" {
		return gs, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	gs.path = filepath.Join(dir, GenerationsFile)
	data, err := os.ReadFile(gs.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("state dir: %w", err)
	default:
		var f genFile
		if json.Unmarshal(data, &f) != nil || f.Format != generationsFormat {
			return nil, fmt.Errorf("state dir: %s is not a kvca generations file", GenerationsFile)
		}
		for _, r := range f.Endpoints {
			if r.Generation < 1 {
				return nil, fmt.Errorf("state dir: %s holds a generation below 1", GenerationsFile)
			}
			gs.recs[r.EndpointID] = r
		}
	}
	for i, b := range backends {
		gs.start(t, i, b.URL)
	}
	if err := gs.saveLocked(); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return gs, nil
}

// start moves backend i's table generation one past what its endpoint
// had (as stored, or seen before it was removed); mu is held or gs not
// shared yet.
func (gs *generations) start(t *chain.Table, i int, url string) {
	id := kdn.EndpointIDForName(url)
	next := uint32(1)
	if r, ok := gs.recs[id]; ok {
		next = r.Generation + 1
	}
	gen := t.StartGeneration(i, next)
	gs.recs[id] = genRecord{EndpointID: id, Name: url, Generation: max(gen, gs.recs[id].Generation)}
}

// follow takes the backends in force after a reload: an endpoint that
// arrives in a slot continues past every generation it had, whatever
// slot it had then, so its generations only ever grow.
func (gs *generations) follow(t *chain.Table, backends []*sched.Backend) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	changed := false
	for i, b := range backends {
		id := kdn.EndpointIDForName(b.URL)
		if b.Retired() {
			id = ""
		}
		for len(gs.ids) <= i {
			gs.ids = append(gs.ids, "")
		}
		if gs.ids[i] == id {
			continue
		}
		gs.ids[i], changed = id, true
		if id != "" {
			gs.start(t, i, b.URL)
		}
	}
	if changed && gs.path != "" {
		if err := gs.saveLocked(); err != nil {
			gs.log.Error("kdn: endpoint generations could not be persisted", "err", err)
		}
	}
}

// note records that backend b has generation gen, persisting it first if
// it is new. A failed write is logged and retried on the next note: the
// in-memory record only moves once the file has.
func (gs *generations) note(b int, gen uint32) {
	if gs.path == "" {
		return
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if b < 0 || b >= len(gs.ids) || gs.ids[b] == "" {
		return
	}
	id := gs.ids[b]
	old, had := gs.recs[id]
	if gen <= old.Generation {
		return
	}
	r := old
	r.EndpointID, r.Generation = id, gen
	gs.recs[id] = r
	if err := gs.saveLocked(); err != nil {
		if had {
			gs.recs[id] = old
		} else {
			delete(gs.recs, id)
		}
		gs.log.Error("kdn: endpoint generation could not be persisted", "endpoint_id", id, "generation", gen, "err", err)
	}
}

func (gs *generations) saveLocked() error {
	f := genFile{Format: generationsFormat, Endpoints: make([]genRecord, 0, len(gs.recs))}
	for _, r := range gs.recs {
		f.Endpoints = append(f.Endpoints, r)
	}
	slices.SortFunc(f.Endpoints, func(a, b genRecord) int { return cmp.Compare(a.EndpointID, b.EndpointID) })
	data, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		return err
	}
	return writeAtomic(gs.path, data)
}
