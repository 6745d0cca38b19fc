package apikeys

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvca/kvca/internal/testkit"
)

func TestParse(t *testing.T) {
	file := "# tenants\n\n" +
		Line([]byte("sk-alpha-1"), "alpha", 60, 10000) + "\n" +
		Line([]byte("sk-alpha-2"), "alpha", 0, 0) + "   # rotated in\n" +
		"  " + Line([]byte("sk-beta"), "beta", 5, 0) + "\n"
	s, err := Parse(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if s.Keys() != 3 {
		t.Fatalf("keys %d, want 3", s.Keys())
	}
	for _, c := range []struct {
		key      string
		tenant   string
		id       int
		rpm, tpm int64
	}{{"sk-alpha-1", "alpha", 0, 60, 10000}, {"sk-alpha-2", "alpha", 0, 60, 10000}, {"sk-beta", "beta", 1, 5, 0}} {
		tn, ok := s.Lookup([]byte(c.key))
		if !ok || tn.Name != c.tenant || tn.ID != c.id || tn.RPM != c.rpm || tn.TPM != c.tpm {
			t.Errorf("%s: got %+v %v, want %s id %d rpm %d tpm %d", c.key, tn, ok, c.tenant, c.id, c.rpm, c.tpm)
		}
	}
	for _, k := range []string{"", "sk-alpha", "sk-alpha-1 ", "SK-ALPHA-1", "sha256:" + Hash([]byte("sk-beta"))[7:]} {
		if tn, ok := s.Lookup([]byte(k)); ok {
			t.Errorf("%q accepted as %s", k, tn.Name)
		}
	}
}

func TestParseErrors(t *testing.T) {
	h := Hash([]byte("k"))
	for _, c := range []struct {
		file string
		line int
		msg  string
	}{
		{"# x\nsk-live-123 tenant=a\n", 2, "must start with sha256:"},
		{h[:20] + " tenant=a\n", 1, "hex digits, want 64"},
		{"sha256:" + strings.Repeat("zz", 32) + " tenant=a\n", 1, "not hexadecimal"},
		{h + "\n", 1, "missing tenant"},
		{h + " tenant=a b\n", 1, `"b" is not name=value`},
		{h + " tenant=a/b\n", 1, "must be 1-64"},
		{h + " tenant=a rpm=0\n", 1, "rpm=0 must be"},
		{h + " tenant=a tpm=1e6\n", 1, "tpm=1e6 must be"},
		{h + " tenant=a rpm=1 rpm=2\n", 1, "rpm= given twice"},
		{h + " tenant=a burst=3\n", 1, `unknown field "burst"`},
		{h + " tenant=a\n\n" + h + " tenant=b\n", 3, "already on line 1"},
		{h + " tenant=a rpm=5\n" + Hash([]byte("j")) + " tenant=a rpm=6\n", 2, "rpm=5 on line 1"},
	} {
		_, err := Parse(strings.NewReader(c.file))
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Line != c.line || !strings.Contains(pe.Msg, c.msg) {
			t.Errorf("%q: got %v, want line %d %q", c.file, err, c.line, c.msg)
		}
		if err != nil && strings.Contains(err.Error(), "sk-live-123") {
			t.Errorf("error echoes the line: %v", err)
		}
	}
}

func TestCredential(t *testing.T) {
	for _, c := range []struct{ name, value, key string }{
		{"Authorization", "Bearer sk-1", "sk-1"},
		{"authorization", "bearer   sk-1 ", "sk-1"},
		{"AUTHORIZATION", "BEARER sk-1", "sk-1"},
		{"x-api-key", "sk-ant-1", "sk-ant-1"},
		{"X-Api-Key", " sk-ant-1", "sk-ant-1"},
		{"Authorization", "Basic dXNlcjpwYXNz", ""},
		{"Authorization", "Bearer ", ""},
		{"x-api-keys", "sk", ""},
		{"Proxy-Authorization", "Bearer sk", ""},
	} {
		k, ok := Credential([]byte(c.name), []byte(c.value))
		if string(k) != c.key || ok != (c.key != "") {
			t.Errorf("%s: %s: got %q %v, want %q", c.name, c.value, k, ok, c.key)
		}
	}
}

func TestLookupAllocatesNothing(t *testing.T) {
	s, err := Parse(strings.NewReader(Line([]byte("sk-1"), "a", 0, 0) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	good, bad := []byte("sk-1"), []byte("sk-2")
	if n := testing.AllocsPerRun(100, func() {
		s.Lookup(good)
		s.Lookup(bad)
	}); n != 0 {
		t.Fatalf("%v allocs per lookup", n)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestRotateUnderLookups rewrites the file while lookups run: the key
// kept in every version is never refused, the retired one stops working
// and the new one starts with the reload, and tenant IDs stay.
func TestRotateUnderLookups(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	keep, old, fresh := []byte("sk-keep"), []byte("sk-old"), []byte("sk-new")
	v1 := Line(keep, "keep", 0, 0) + "\n" + Line(old, "rot", 10, 0) + "\n"
	v2 := Line(keep, "keep", 0, 0) + "\n" + Line(fresh, "rot", 20, 0) + "\n"
	writeFile(t, path, v1)
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	var loads atomic.Int32
	s.OnLoad(func(*Set) { loads.Add(1) })
	stop := make(chan struct{})
	var refused atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if tn, ok := s.Lookup(keep); !ok || tn.Name != "keep" || tn.ID != 0 {
					refused.Add(1)
				}
			}
		}()
	}
	for i := range 50 {
		v := v1
		if i%2 == 0 {
			v = v2
		}
		writeFile(t, path, v)
		if _, err := s.reload(false); err != nil {
			t.Fatal(err)
		}
		_, oldOK := s.Lookup(old)
		tn, newOK := s.Lookup(fresh)
		if oldOK == (i%2 == 0) || newOK != (i%2 == 0) {
			t.Fatalf("version %d: old key accepted %v, new key accepted %v", i%2+1, oldOK, newOK)
		}
		if newOK && (tn.ID != 1 || tn.RPM != 20) {
			t.Fatalf("rotated tenant %+v, want ID 1 rpm 20", tn)
		}
	}
	// A broken edit keeps the previous keys.
	writeFile(t, path, v2+"oops\n")
	if _, err := s.reload(false); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("broken file: %v", err)
	}
	if _, ok := s.Lookup(old); !ok {
		t.Fatal("a broken file dropped the keys in force")
	}
	close(stop)
	wg.Wait()
	if n := refused.Load(); n != 0 {
		t.Fatalf("the kept key was refused %d times during rotation", n)
	}
	if n := loads.Load(); n != 51 {
		t.Fatalf("OnLoad ran %d times, want 51 (once at registration, once per change)", n)
	}
}

// TestWatchPolls sees an in-place rewrite through the poll, with no call.
func TestWatchPolls(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	writeFile(t, path, Line([]byte("a"), "a", 0, 0)+"\n")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	loaded := make(chan *Set, 4)
	s.OnLoad(func(set *Set) { loaded <- set })
	<-loaded
	stop := s.Watch(5e6)
	defer stop()
	if err := os.WriteFile(path, []byte(Line([]byte("b"), "b", 0, 0)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	set := <-loaded
	if _, ok := set.Lookup([]byte("b")); !ok {
		t.Fatal("new key missing after the poll")
	}
	if _, ok := set.Lookup([]byte("a")); ok {
		t.Fatal("removed key still accepted")
	}
}

func BenchmarkLookup(b *testing.B) {
	var file strings.Builder
	for i := range 1000 {
		file.WriteString(Line([]byte("sk-"+string(rune('a'+i%26))+strings.Repeat("x", i)), "t", 0, 0) + "\n")
	}
	s, err := Parse(strings.NewReader(file.String()))
	if err != nil {
		b.Fatal(err)
	}
	key := []byte("sk-a")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := s.Lookup(key); !ok {
			b.Fatal("not found")
		}
	}
}

func TestCredentialHeaders(t *testing.T) {
	for name, want := range map[string]bool{"Authorization": true, "x-api-key": true, "X-API-KEY": true, "api-key": true,
		"Proxy-Authorization": false, "Cookie": false, "x-api-keys": false} {
		if IsCredentialHeader([]byte(name)) != want {
			t.Errorf("%s: %v", name, !want)
		}
	}
	if got := string(AppendBackendAuth(nil, "be-key")); got != "Authorization: Bearer be-key\r\n" {
		t.Fatalf("%q", got)
	}
	if AppendBackendAuth(nil, "") != nil {
		t.Fatal("a header without a key")
	}
}

// TestSIGHUP reloads on the signal, with no poll in between.
func TestSIGHUP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	writeFile(t, path, Line([]byte("a"), "a", 0, 0)+"\n")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	loaded := make(chan *Set, 4)
	s.OnLoad(func(set *Set) { loaded <- set })
	<-loaded
	stop := s.Watch(time.Hour)
	defer stop()
	writeFile(t, path, Line([]byte("b"), "b", 0, 0)+"\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if _, ok := (<-loaded).Lookup([]byte("b")); !ok {
		t.Fatal("new key missing after SIGHUP")
	}
	// OnLoad runs before the set comes into force and is counted.
	testkit.WaitUntil(t, "the reload counted", func() bool {
		var m bytes.Buffer
		s.WritePrometheus(&m)
		return strings.Contains(m.String(), `kvca_apikeys_reloads_total{result="ok"} 2`+"\n")
	})
	var m bytes.Buffer
	s.Refused(true)
	s.WritePrometheus(&m)
	for _, line := range []string{`kvca_apikeys_keys 1`, `kvca_apikeys_reloads_total{result="ok"} 2`, `kvca_apikeys_refused_total{reason="missing"} 1`} {
		if !strings.Contains(m.String(), line+"\n") {
			t.Errorf("metrics lack %s:\n%s", line, m.String())
		}
	}
	if strings.Contains(m.String(), Hash([]byte("b"))[7:]) {
		t.Error("metrics show a key digest")
	}
}
