package live

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStoreSurvivesInterruptedWrites: a temp file left by a crash between
// write and rename is ignored, the last complete record is what loads, and
// a file kvca did not write stops start-up rather than being half-read.
func TestStoreSurvivesInterruptedWrites(t *testing.T) {
	st := store{dir: t.TempDir()}
	if _, err := st.load(); err != nil {
		t.Fatal(err)
	}
	ref := "docs@1"
	r := &record{Format: recordFormat, KnowledgeID: "k/1 é", Current: "1",
		Revisions: []revision{{Revision: "1", ContentReference: &ref, At: time.Unix(0, 0).UTC(),
			Prefix: &prefix{API: "chat", Body: []byte(`{"a":"\u00e9 <x>"}`)}}}}
	if err := st.save(r); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(st.dir, "knowledge")
	if err := os.WriteFile(filepath.Join(dir, ".tmp-123"), []byte(`{"torn`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := st.load()
	if err != nil {
		t.Fatal(err)
	}
	g := got["k/1 é"]
	if g == nil || string(g.Revisions[0].Prefix.Body) != `{"a":"\u00e9 <x>"}` || *g.Revisions[0].ContentReference != ref {
		t.Fatalf("loaded %+v", g)
	}
	if err := os.WriteFile(filepath.Join(dir, "foreign.json"), []byte(`{"format":9}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := st.load(); err == nil {
		t.Fatal("a foreign file was accepted")
	}
}
