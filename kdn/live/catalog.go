package live

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/kvca/kvca/kdn"
)

// Catalog errors, mapped to contract outcomes by the callers.
var (
	errUnknownKnowledge = errors.New("knowledge is not registered")
	errUnknownRevision  = errors.New("revision is not registered for this knowledge")
	errRegistered       = errors.New("knowledge is already registered with another revision or content reference; use update_knowledge")
	errPersist          = errors.New("the knowledge store could not be written")
)

// catalog is the knowledge registry: persisted descriptors and prefixes,
// plus what they derive to in this process (chains, artifacts).
type catalog struct {
	st  store
	der deriver
	log *slog.Logger

	mu         sync.Mutex
	recs       map[string]*record
	derived    map[revKey]*prefixInfo
	byArtifact map[string]*prefixInfo
	reports    map[string]map[kdn.OutcomeCode]int
}

type revKey struct{ id, rev string }

func openCatalog(st store, der deriver, log *slog.Logger) (*catalog, error) {
	recs, err := st.load()
	if err != nil {
		return nil, err
	}
	c := &catalog{
		st: st, der: der, log: log, recs: recs,
		derived: map[revKey]*prefixInfo{}, byArtifact: map[string]*prefixInfo{},
		reports: map[string]map[kdn.OutcomeCode]int{},
	}
	for id, r := range recs {
		for _, v := range r.Revisions {
			if v.Prefix == nil {
				continue
			}
			// A prefix that no longer derives (say, the block size grew past
			// it) stays stored but offers no artifact until re-uploaded.
			if p, err := der.derive(id, v.Revision, v.Prefix); err != nil {
				log.Warn("kdn: stored prefix offers no artifact", "knowledge_id", id, "revision", v.Revision, "reason", err.Error())
			} else {
				c.index(p)
			}
		}
	}
	return c, nil
}

func (c *catalog) index(p *prefixInfo) {
	k := revKey{p.knowledgeID, p.revision}
	if old := c.derived[k]; old != nil {
		delete(c.byArtifact, old.artifact.ID())
	}
	c.derived[k] = p
	c.byArtifact[p.artifact.ID()] = p
}

// register creates a knowledge item; registering the same descriptor again
// is a no-op so that clients may retry.
func (c *catalog) register(id, rev string, ref kdn.Opt[string], now time.Time) (*record, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.recs[id]; ok {
		cur := r.rev(r.Current)
		if r.Current != rev || !sameRef(cur.ContentReference, ref) {
			return nil, errRegistered
		}
		return r.clone(), nil
	}
	r := &record{Format: recordFormat, KnowledgeID: id, Current: rev,
		Revisions: []revision{{Revision: rev, ContentReference: refPtr(ref), At: now.UTC()}}}
	if err := c.save(r); err != nil {
		return nil, err
	}
	c.recs[id] = r
	return r.clone(), nil
}

// update makes rev the current revision, adding it when new; an earlier
// revision's prefix and artifacts stay available.
func (c *catalog) update(id, rev string, ref kdn.Opt[string], now time.Time) (*record, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.recs[id]
	if !ok {
		return nil, errUnknownKnowledge
	}
	n := r.clone()
	if v := n.rev(rev); v != nil {
		v.ContentReference = refPtr(ref)
	} else {
		n.Revisions = append(n.Revisions, revision{Revision: rev, ContentReference: refPtr(ref), At: now.UTC()})
	}
	n.Current = rev
	if err := c.save(n); err != nil {
		return nil, err
	}
	c.recs[id] = n
	return n.clone(), nil
}

// putPrefix stores the prefix of one revision ("" = current) and indexes
// its artifact. The body is canonicalised and hashed outside the lock, so
// a large upload does not hold up lookups.
func (c *catalog) putPrefix(id, rev, api string, body []byte, now time.Time) (*prefixInfo, error) {
	c.mu.Lock()
	r, ok := c.recs[id]
	if ok && rev == "" {
		rev = r.Current
	}
	c.mu.Unlock()
	if !ok {
		return nil, errUnknownKnowledge
	}
	px := &prefix{API: api, Body: append([]byte(nil), body...), UploadedAt: now.UTC().Truncate(time.Microsecond)}
	p, err := c.der.derive(id, rev, px)
	if err != nil {
		if _, e := c.revisionOf(id, rev); e != nil {
			return nil, e // an unknown revision explains more than a bad body
		}
		return nil, err
	}
	px.API = p.api.String()
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok = c.recs[id]
	if !ok {
		return nil, errUnknownKnowledge
	}
	n := r.clone()
	v := n.rev(rev)
	if v == nil {
		return nil, errUnknownRevision
	}
	v.Prefix = px
	if err := c.save(n); err != nil {
		return nil, err
	}
	c.recs[id] = n
	c.index(p)
	return p, nil
}

func (c *catalog) revisionOf(id, rev string) (*revision, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.recs[id]
	if !ok {
		return nil, errUnknownKnowledge
	}
	v := r.rev(rev)
	if v == nil {
		return nil, errUnknownRevision
	}
	return v, nil
}

func (c *catalog) save(r *record) error {
	if err := c.st.save(r); err != nil {
		c.log.Error("kdn: knowledge store write failed", "err", err)
		return errPersist
	}
	return nil
}

// prefixBody returns the stored body of a revision ("" = current).
func (c *catalog) prefixBody(id, rev string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.recs[id]
	if !ok {
		return nil, errUnknownKnowledge
	}
	if rev == "" {
		rev = r.Current
	}
	v := r.rev(rev)
	if v == nil || v.Prefix == nil {
		return nil, errUnknownRevision
	}
	return append([]byte(nil), v.Prefix.Body...), nil
}

// resolve returns the current revision's artifacts and all revisions'.
func (c *catalog) resolve(id string) (current, all []*prefixInfo, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.recs[id]
	if !ok {
		return nil, nil, errUnknownKnowledge
	}
	for _, v := range r.Revisions {
		if p := c.derived[revKey{id, v.Revision}]; p != nil {
			all = append(all, p)
			if v.Revision == r.Current {
				current = append(current, p)
			}
		}
	}
	return current, all, nil
}

func (c *catalog) artifact(id string) (*prefixInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.byArtifact[id]
	return p, ok
}

func (c *catalog) report(id string, o kdn.OutcomeCode) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.recs[id]; !ok {
		return errUnknownKnowledge
	}
	if c.reports[id] == nil {
		c.reports[id] = map[kdn.OutcomeCode]int{}
	}
	c.reports[id][o]++
	return nil
}

func sameRef(p *string, o kdn.Opt[string]) bool {
	v, ok := o.Get()
	if p == nil || !ok {
		return p == nil && !ok
	}
	return *p == v
}

func refPtr(o kdn.Opt[string]) *string {
	if v, ok := o.Get(); ok {
		return &v
	}
	return nil
}

// Description is the admin view of one knowledge item (GET
// /kdn/knowledge/<id>): its revisions, their prefixes and artifacts, and
// the request outcomes clients reported.
type Description struct {
	KnowledgeID string                  `json:"knowledge_id"`
	Current     string                  `json:"current_revision"`
	Revisions   []RevisionDescription   `json:"revisions"`
	Reports     map[kdn.OutcomeCode]int `json:"reported_outcomes"`
}

// RevisionDescription is one revision in a Description.
type RevisionDescription struct {
	Revision         string     `json:"revision"`
	ContentReference *string    `json:"content_reference"`
	At               time.Time  `json:"at"`
	API              string     `json:"api,omitempty"`
	Blocks           int        `json:"blocks,omitempty"`
	ArtifactID       string     `json:"artifact_id,omitempty"`
	UploadedAt       *time.Time `json:"uploaded_at,omitempty"`
}

func (c *catalog) describe(id string) (Description, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.recs[id]
	if !ok {
		return Description{}, errUnknownKnowledge
	}
	d := Description{KnowledgeID: id, Current: r.Current, Revisions: []RevisionDescription{}, Reports: map[kdn.OutcomeCode]int{}}
	for o, n := range c.reports[id] {
		d.Reports[o] = n
	}
	for _, v := range r.Revisions {
		rd := RevisionDescription{Revision: v.Revision, ContentReference: v.ContentReference, At: v.At}
		if v.Prefix != nil {
			at := v.Prefix.UploadedAt
			rd.API, rd.UploadedAt = v.Prefix.API, &at
		}
		if p := c.derived[revKey{id, v.Revision}]; p != nil {
			rd.Blocks, rd.ArtifactID = len(p.chain), p.artifact.ID()
		}
		d.Revisions = append(d.Revisions, rd)
	}
	return d, nil
}
