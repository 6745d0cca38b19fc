package canon_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvca/kvca/canon"
)

// canonString is the CBR's string form, written out independently: only
// '"', '\\' and control bytes are escaped, with the short forms where JSON
// has them and lowercase \u00xx otherwise.
func canonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if c < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// countingSink records the CBR and how it was delivered.
type countingSink struct {
	b            []byte
	writes, empt int
}

func (s *countingSink) Write(p []byte) {
	s.writes++
	if len(p) == 0 {
		s.empt++
	}
	s.b = append(s.b, p...)
}

// TestLongCBRIsExact: a chat body whose CBR is many times the writer's
// buffer, mixing long clean runs, dense escapes and many small messages,
// comes out byte for byte as the format says, in few writes, none empty.
func TestLongCBRIsExact(t *testing.T) {
	t.Parallel()
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var msgs []msg
	for i := range 300 {
		var content string
		switch i % 4 {
		case 0:
			content = strings.Repeat("clean run of prompt text ", 40+i%7) // > 512 bytes: written directly
		case 1:
			content = strings.Repeat("a\"b\\c\nd\te\x01f\x1f<>&", 20+i%5) // an escape every few bytes
		case 2:
			content = fmt.Sprint("short ", i)
		default:
			content = strings.Repeat("x", i) // every length up to 300
		}
		msgs = append(msgs, msg{Role: []string{"user", "assistant", "system"}[i%3], Content: content})
	}
	body, err := json.Marshal(map[string]any{"model": "m", "messages": msgs, "temperature": 0.5})
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	want.WriteString("chat\n{\"model\":\"m\"}\n")
	for _, m := range msgs {
		want.WriteString(`{"content":` + canonString(m.Content) + `,"role":` + canonString(m.Role) + "}\n")
	}
	for _, c := range []*canon.Canonicalizer{canon.New(nil), canon.NewDecoding(nil)} {
		var s countingSink
		var info canon.Info
		if err := c.Canonicalize(canon.Chat, body, &s, &info); err != nil {
			t.Fatal(err)
		}
		if got := string(s.b); got != want.String() {
			i := 0
			for i < len(got) && i < want.Len() && got[i] == want.String()[i] {
				i++
			}
			t.Fatalf("CBR of %d bytes differs from the expected %d at byte %d: got %.80q, want %.80q",
				len(got), want.Len(), i, got[i:], want.String()[i:])
		}
		if info.CBRLen != want.Len() || info.Messages != len(msgs) || string(info.Model) != "m" {
			t.Fatalf("info %+v, want CBRLen %d, %d messages, model m", info, want.Len(), len(msgs))
		}
		if s.empt > 0 || s.writes > want.Len()/256 {
			t.Fatalf("%d writes (%d empty) for %d bytes: the writer does not batch", s.writes, s.empt, want.Len())
		}
	}
}

func TestModelIsReportedOnlyWhenAString(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"model":"llama-3","messages":[{"role":"user","content":"x"}]}`:            "llama-3",
		`{"model":7,"messages":[{"role":"user","content":"x"}]}`:                    "",
		`{"model":"a","model":"b","messages":[{"role":"user","content":"x"}]}`:      "b",
		`{"messages":[{"role":"user","content":"x"}]}`:                              "",
		`{"model":["not","a","string"],"messages":[{"role":"user","content":"x"}]}`: "",
		`{"model":"with \"quotes\"","messages":[{"role":"user","content":"x"}]}`:    `with "quotes"`,
	} {
		_, info, err := cbr(t, canon.New(nil), canon.Chat, body)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if string(info.Model) != want {
			t.Errorf("%s: model %q, want %q", body, info.Model, want)
		}
	}
}

// TestSessionCoversTheFirst4096Bytes: the session hash covers exactly the
// first 4096 CBR bytes of the prompt; a difference at byte 4096 or later
// leaves it alone, at byte 4095 or earlier changes it, whether that byte
// is part of a long clean run or of an escape.
func TestSessionCoversTheFirst4096Bytes(t *testing.T) {
	t.Parallel()
	c := canon.New(nil)
	session := func(prompt string) uint64 {
		t.Helper()
		body, err := json.Marshal(map[string]any{"model": "m", "prompt": prompt})
		if err != nil {
			t.Fatal(err)
		}
		_, info, err := cbr(t, c, canon.Completions, string(body))
		if err != nil {
			t.Fatal(err)
		}
		if info.Session == 0 {
			t.Fatal("no session hash")
		}
		return info.Session
	}
	base := strings.Repeat("a", 5000)
	at := func(k int, s string) string { return base[:k] + s + base[k+1:] }
	// The prompt's CBR starts with its opening quote: content byte k is CBR
	// byte k+1.
	for k := 4080; k <= 4100; k++ {
		differ := session(at(k, "a")) != session(at(k, "b"))
		if want := k+1 < 4096; differ != want {
			t.Errorf("plain byte at CBR offset %d: sessions differ %v, want %v", k+1, differ, want)
		}
		// \u0001 against \u0002: they differ in the escape's last byte,
		// CBR byte k+6.
		differ = session(at(k, "\x01")) != session(at(k, "\x02"))
		if want := k+6 < 4096; differ != want {
			t.Errorf("escape ending at CBR offset %d: sessions differ %v, want %v", k+6, differ, want)
		}
	}
}

// offerSink is a LiteralSink that never knows a literal and records which
// literals it was offered.
type offerSink struct {
	buf
	offered, wrote []int
}

func (s *offerSink) SkipLiteral(lit []byte) (int, bool) {
	s.offered = append(s.offered, len(lit))
	return 0, false
}

func (s *offerSink) WroteLiteral(lit []byte, cbr int) { s.wrote = append(s.wrote, len(lit)) }

// TestLiteralsOfferedFrom256Bytes: string literals of 256 bytes or more
// (quotes included) are offered to a LiteralSink, shorter ones never, nor
// the ones the session hash is reading; the CBR is the same either way.
func TestLiteralsOfferedFrom256Bytes(t *testing.T) {
	t.Parallel()
	lit := func(n int) string { return strings.Repeat("z", n-2) } // n bytes with its quotes
	body, err := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{
		{"role": "user", "content": lit(400)}, // hashed for the session: not offered
		{"role": "system", "content": lit(255)},
		{"role": "system", "content": lit(256)},
		{"role": "user", "content": lit(300)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	plain, _, err := cbr(t, canon.New(nil), canon.Chat, string(body))
	if err != nil {
		t.Fatal(err)
	}
	var s offerSink
	var info canon.Info
	if err := canon.New(nil).Canonicalize(canon.Chat, body, &s, &info); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.offered, []int{256, 300}) || !slices.Equal(s.wrote, []int{256, 300}) {
		t.Fatalf("offered %v, wrote %v; want 256 and 300 both times", s.offered, s.wrote)
	}
	if string(s.b) != plain {
		t.Fatal("the CBR through a LiteralSink differs from the plain one")
	}
}
