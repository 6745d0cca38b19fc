package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvca/kvca/chain"
)

// modelIndex says which backends serve which model. It is rebuilt whole
// on every change and swapped in atomically, so routing reads it without
// a lock.
type modelIndex struct {
	byName map[string]chain.Set
	// wild holds backends whose models are unknown (discovery has not
	// succeeded yet): they may serve anything.
	wild  chain.Set
	known bool // some backend's models are known
	// ttft holds each known model's time-to-first-token series by route:
	// metric labels only for models discovered or configured, so a client
	// cannot grow the series by naming models.
	ttft map[string]*[numRoutes]*metrics.PrometheusHistogram
}

// modelList is one backend's models: raw /v1/models entries and their ids.
type modelList struct {
	ids  []string
	data []json.RawMessage
}

var errUnknownModel = errors.New("unknown model")

// allowedFor narrows routing to the backends serving model; nil means any.
func (s *Server) allowedFor(model []byte, dst *chain.Set) (*chain.Set, error) {
	if len(model) == 0 {
		return nil, nil
	}
	idx := s.models.Load()
	if idx == nil || !idx.known {
		return nil, nil
	}
	if set, ok := idx.byName[string(model)]; ok {
		*dst = set
		dst.Or(&idx.wild)
		return dst, nil
	}
	if !idx.wild.Empty() {
		*dst = idx.wild
		return dst, nil
	}
	return nil, errUnknownModel
}

func (s *Server) rebuildModels() {
	idx := &modelIndex{byName: map[string]chain.Set{}, ttft: map[string]*[numRoutes]*metrics.PrometheusHistogram{}}
	for _, u := range s.fleet().live() {
		l := u.models.Load()
		if l == nil {
			idx.wild.Add(u.b.Index)
			continue
		}
		idx.known = true
		for _, id := range l.ids {
			set := idx.byName[id]
			set.Add(u.b.Index)
			idx.byName[id] = set
			if idx.ttft[id] == nil {
				var h [numRoutes]*metrics.PrometheusHistogram
				for _, r := range []int{routeChat, routeCompletions, routeResponses, routeMessages, routePassthrough} {
					h[r] = s.m.ttftHistogram(r, id)
				}
				idx.ttft[id] = &h
			}
		}
	}
	s.models.Store(idx)
}

// staticModels turns a #model-a,model-b suffix into a model list.
func staticModels(ids []string) *modelList {
	l := &modelList{ids: ids}
	for _, id := range ids {
		b, _ := json.Marshal(map[string]any{"id": id, "object": "model", "owned_by": "kvca"})
		l.data = append(l.data, b)
	}
	return l
}

// discoverModels asks every backend without fixed models for its
// /v1/models at start and then every ModelsInterval; sooner (every 2 s)
// while some backend's list is unknown, as when kvca starts before its
// backends, and at once when a backend comes back.
func (s *Server) discoverModels(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.modelsWake:
		}
		changed := false
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, u := range s.fleet().live() {
			if u.addr.models != nil || !u.b.Healthy() {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := fetchModels(u, nil)
				if err != nil {
					if u.models.Load() == nil {
						s.log.Warn("model discovery failed", "backend", u.b.Name, "err", err)
					}
					return
				}
				if old := u.models.Load(); old == nil || !slices.Equal(old.ids, l.ids) {
					u.models.Store(l)
					s.log.Info("backend models", "backend", u.b.Name, "models", l.ids)
					mu.Lock()
					changed = true
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if changed {
			s.rebuildModels()
		}
		next := s.cfg.ModelsInterval
		for _, u := range s.fleet().live() {
			if u.models.Load() == nil {
				next = min(next, 2*time.Second)
			}
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next)
	}
}

// fetchModels asks one backend for its models, with the client's
// credentials when answering a client.
func fetchModels(u *upstream, creds [][2]string) (*modelList, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.addr.url+"/v1/models", nil)
	if err != nil {
		return nil, err
	}
	for _, kv := range creds {
		req.Header.Set(kv[0], kv[1])
	}
	resp, err := u.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/v1/models answered %d", resp.StatusCode)
	}
	var body struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("/v1/models: %w", err)
	}
	l := &modelList{}
	for _, m := range body.Data {
		var id struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(m, &id) == nil && id.ID != "" {
			l.ids = append(l.ids, id.ID)
			l.data = append(l.data, m)
		}
	}
	slices.Sort(l.ids)
	return l, nil
}

// modelsKnown reports whether every healthy backend's models are known,
// so the union can be answered without asking anyone.
func (s *Server) modelsKnown() bool {
	for _, u := range s.fleet().live() {
		if u.b.Healthy() && u.models.Load() == nil {
			return false
		}
	}
	return true
}

// modelsAnswer answers GET /v1/models (id empty) with the union of the
// healthy backends' models, or GET /v1/models/{id} with that model: as
// discovered, or asked now (with the client's credentials) when a
// backend's list is not known yet; it may block on those requests.
func (s *Server) modelsAnswer(creds [][2]string, id string) (int, []byte) {
	ups := s.fleet().live()
	lists := make([]*modelList, len(ups))
	var wg sync.WaitGroup
	for i, u := range ups {
		if !u.b.Healthy() {
			continue
		}
		if l := u.models.Load(); l != nil {
			lists[i] = l
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := fetchModels(u, creds)
			if err != nil {
				s.log.Warn("model discovery failed", "backend", u.b.Name, "err", err)
				return
			}
			lists[i] = l
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	out := struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
	}{Object: "list", Data: []json.RawMessage{}}
	for _, l := range lists {
		if l == nil {
			continue
		}
		for i, m := range l.ids {
			if id != "" && m == id {
				return 200, append(append([]byte(nil), l.data[i]...), '\n')
			}
			if !seen[m] {
				seen[m] = true
				out.Data = append(out.Data, l.data[i])
			}
		}
	}
	if len(seen) == 0 && !s.anyHealthy() {
		return 503, appendErrorBody(nil, replyNoBackend.typ, replyNoBackend.code, replyNoBackend.msg)
	}
	if id != "" {
		r := unknownModel([]byte(id))
		return 404, appendErrorBody(nil, r.typ, r.code, r.msg)
	}
	b, _ := json.Marshal(out)
	return 200, append(b, '\n')
}

func (s *Server) anyHealthy() bool {
	for _, u := range s.fleet().live() {
		if u.b.Healthy() {
			return true
		}
	}
	return false
}

// ttftOf is the time-to-first-token series for a request's route and
// model.
func (s *Server) ttftOf(route int, model []byte) *metrics.PrometheusHistogram {
	if idx := s.models.Load(); idx != nil {
		if h := idx.ttft[string(model)]; h != nil && h[route] != nil {
			return h[route]
		}
	}
	return s.m.ttftOther[route]
}
