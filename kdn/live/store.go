package live

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// record is one knowledge item as persisted: its descriptor history and,
// per revision, the uploaded prefix. Chains are never persisted: they depend
// on the hash key and block size, which may change across restarts.
type record struct {
	Format      int        `json:"format"`
	KnowledgeID string     `json:"knowledge_id"`
	Current     string     `json:"current_revision"`
	Revisions   []revision `json:"revisions"` // in the order they were first seen
}

type revision struct {
	Revision         string    `json:"revision"`
	ContentReference *string   `json:"content_reference"`
	At               time.Time `json:"at"`
	Prefix           *prefix   `json:"prefix,omitempty"`
}

// prefix is an OpenAI request body exactly as uploaded (base64 in the file,
// so the bytes survive a round trip unchanged).
type prefix struct {
	API        string    `json:"api"` // "chat" or "completions"
	Body       []byte    `json:"body"`
	UploadedAt time.Time `json:"uploaded_at"`
}

const recordFormat = 1

func (r *record) rev(name string) *revision {
	for i := range r.Revisions {
		if r.Revisions[i].Revision == name {
			return &r.Revisions[i]
		}
	}
	return nil
}

func (r *record) clone() *record {
	c := *r
	c.Revisions = make([]revision, len(r.Revisions))
	for i, v := range r.Revisions {
		if v.Prefix != nil {
			p := *v.Prefix
			v.Prefix = &p
		}
		c.Revisions[i] = v
	}
	return &c
}

// store persists records as one JSON file each under dir/knowledge; an
// empty dir keeps everything in memory. One file per item keeps every
// write small and independent, and an atomic rename per write means a
// crash leaves either the old or the new record, never a torn one.
type store struct {
	dir string
}

func (s store) path(id string) string {
	// Knowledge ids are free text: hash them into a safe, fixed-length name.
	sum := sha256.Sum256([]byte(id))
	return filepath.Join(s.dir, "knowledge", hex.EncodeToString(sum[:16])+".json")
}

// load reads every record; a file that cannot be read is an error, since
// writes are atomic and a damaged file means something outside kvca
// touched the directory.
func (s store) load() (map[string]*record, error) {
	out := map[string]*record{}
	if s.dir == "" {
		return out, nil
	}
	dir := filepath.Join(s.dir, "knowledge")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".json") {
			continue // includes temp files of interrupted writes
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("state dir: %w", err)
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil || r.Format != recordFormat || r.KnowledgeID == "" || r.rev(r.Current) == nil {
			return nil, fmt.Errorf("state dir: %s is not a kvca knowledge record", name)
		}
		out[r.KnowledgeID] = &r
	}
	return out, nil
}

// save writes r atomically (see writeAtomic).
func (s store) save(r *record) error {
	if s.dir == "" {
		return nil
	}
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	return writeAtomic(s.path(r.KnowledgeID), b)
}

// writeAtomic replaces final with b: temp file, fsync, rename, fsync of
// the directory so the rename itself survives a power loss. A crash
// leaves the old or the new content, never a torn file.
func writeAtomic(final string, b []byte) error {
	dir := filepath.Dir(final)
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	ok = true
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}
