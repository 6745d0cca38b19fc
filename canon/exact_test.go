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
		// Mostly pieces the writer buffers, so that the buffer fills up
		// and is flushed at every offset; now and then a run long enough
		// to bypass it.
		var content string
		switch {
		case i%50 == 0:
			content = strings.Repeat("clean run of prompt text ", 40+i%7) // > 512 bytes: written directly
		case i%4 == 1:
			content = strings.Repeat("a\"b\\c\nd\te\x01f\x1f<>&", 1+i%9) // an escape every few bytes
		case i%4 == 2:
			content = fmt.Sprint("short ", i)
		default:
			content = strings.Repeat("x", i%500) // literals of many lengths below 512
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
// first 4096 CBR bytes of the prompt (completions) or of the first user
// message (chat); a difference at byte 4096 or later leaves it alone, at
// byte 4095 or earlier changes it, whether the byte is part of a long
// clean run or of an escape.
func TestSessionCoversTheFirst4096Bytes(t *testing.T) {
	t.Parallel()
	c := canon.New(nil)
	session := func(api canon.API, body string) uint64 {
		t.Helper()
		_, info, err := cbr(t, c, api, body)
		if err != nil {
			t.Fatal(err)
		}
		if info.Session == 0 {
			t.Fatal("no session hash")
		}
		return info.Session
	}
	quote := func(s string) string {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	completion := func(prompt string) uint64 {
		return session(canon.Completions, `{"model":"m","prompt":`+quote(prompt)+`}`)
	}
	chat := func(content string) uint64 {
		return session(canon.Chat, `{"model":"m","messages":[{"role":"user","content":`+quote(content)+`},{"role":"assistant","content":"ok"}]}`)
	}
	base := strings.Repeat("a", 5000)
	at := func(k int, s string) string { return base[:k] + s + base[k+1:] }
	for k := 4070; k <= 4100; k++ {
		// A completions prompt's CBR starts with its opening quote:
		// content byte k is CBR byte k+1.
		differ := completion(at(k, "a")) != completion(at(k, "b"))
		if want := k+1 < 4096; differ != want {
			t.Errorf("completions, plain byte at CBR offset %d: sessions differ %v, want %v", k+1, differ, want)
		}
		// \u0001 against \u0002 differ in the escape's last byte, CBR byte
		// k+6.
		differ = completion(at(k, "\x01")) != completion(at(k, "\x02"))
		if want := k+6 < 4096; differ != want {
			t.Errorf("completions, escape ending at CBR offset %d: sessions differ %v, want %v", k+6, differ, want)
		}
		// A chat message's CBR starts {"content":" (12 bytes).
		differ = chat(at(k, "a")) != chat(at(k, "b"))
		if want := k+12 < 4096; differ != want {
			t.Errorf("chat, plain byte at CBR offset %d: sessions differ %v, want %v", k+12, differ, want)
		}
	}
	// Spelled with \/ the prompt is decoded and escaped again, the hex
	// digits of the escape byte by byte: hashing must have stopped at
	// exactly 4096 bytes (the quote and 4095 a's), before the first digit,
	// where \u0001 and \u0011 differ.
	raw := func(esc string) uint64 {
		return session(canon.Completions, `{"model":"m","prompt":"`+base+esc+`\/"}`)
	}
	if raw(`\u0001`) != raw(`\u0011`) {
		t.Error("bytes after the first 4096 changed the session (decoded string)")
	}
}

// offerSink is a LiteralSink that never knows a literal and records which
// literals it was offered, the CBR lengths it was told, and empty writes.
type offerSink struct {
	buf
	offered, wrote, cbrLens []int
	empty                   int
}

func (s *offerSink) Write(p []byte) {
	if len(p) == 0 {
		s.empty++
	}
	s.buf.Write(p)
}

func (s *offerSink) SkipLiteral(lit []byte) (int, bool) {
	s.offered = append(s.offered, len(lit))
	return 0, false
}

func (s *offerSink) WroteLiteral(lit []byte, cbr int) {
	s.wrote = append(s.wrote, len(lit))
	s.cbrLens = append(s.cbrLens, cbr)
}

// TestLiteralsOfferedFrom256Bytes: string literals of 256 bytes or more
// (quotes included) are offered to a LiteralSink, shorter ones never, nor
// the ones the session hash is reading; a literal it did not know is
// followed by its CBR length, and the CBR is the same either way.
func TestLiteralsOfferedFrom256Bytes(t *testing.T) {
	t.Parallel()
	lit := func(n int) string { return strings.Repeat("z", n-2) } // n bytes with its quotes
	body, err := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{
		{"role": "user", "content": lit(400)}, // hashed for the session: not offered
		{"role": "system", "content": lit(255)},
		{"role": "system", "content": lit(256)},
		{"role": "user", "content": lit(600)}, // long enough to bypass the buffer
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
	// The literals are canonical: each one's CBR is the literal itself.
	want := []int{256, 600}
	if !slices.Equal(s.offered, want) || !slices.Equal(s.wrote, want) || !slices.Equal(s.cbrLens, want) {
		t.Fatalf("offered %v, wrote %v with CBR lengths %v; want %v each time", s.offered, s.wrote, s.cbrLens, want)
	}
	if string(s.b) != plain || s.empty != 0 {
		t.Fatalf("CBR through a LiteralSink: same as plain %v, %d empty writes", string(s.b) == plain, s.empty)
	}
}

// TestNumbersFollowTheJSONGrammar: numbers are written as sent when the
// JSON grammar allows them and refused otherwise, including forms fastjson
// itself would take.
func TestNumbersFollowTheJSONGrammar(t *testing.T) {
	t.Parallel()
	c := canon.New(nil)
	for num, ok := range map[string]bool{
		"0": true, "-0": true, "7": true, "-1": true, "10": true, "1.09": true, "-0.5": true, "9.90": true,
		"1e5": true, "1E5": true, "1e+5": true, "1e-5": true, "1E-09": true, "2.5e90": true, "-9e9": true,
		"+1": false, "01": false, "1.": false, ".5": false, "1e": false, "1e+": false, "-": false,
		"1.e5": false, "inf": false, "NaN": false, "0x10": false,
	} {
		body := `{"model":"m","messages":[{"role":"user","content":"x","weight":` + num + `}]}`
		got, _, err := cbr(t, c, canon.Chat, body)
		if !ok {
			if err == nil {
				t.Errorf("%s accepted: %q", num, got)
			}
			continue
		}
		if want := "chat\n{\"model\":\"m\"}\n{\"content\":\"x\",\"role\":\"user\",\"weight\":" + num + "}\n"; err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", num, got, err, want)
		}
	}
}

// TestEscapesFoundAnywhereInAWord: decoding and escaping again finds a
// byte to escape at every offset of the eight-byte steps, alone in clean
// text.
func TestEscapesFoundAnywhereInAWord(t *testing.T) {
	t.Parallel()
	c := canon.NewDecoding(nil)
	for _, ch := range []string{`"`, `\`, "\x00", "\x01", "\n", "\x1f"} {
		for pos := range 20 {
			s := strings.Repeat("p", pos) + ch + strings.Repeat("q", 24-pos)
			body, err := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": s}}})
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := cbr(t, c, canon.Chat, string(body))
			if want := "chat\n{}\n{\"content\":" + canonString(s) + ",\"role\":\"user\"}\n"; err != nil || got != want {
				t.Fatalf("%q at %d: %q, %v; want %q", ch, pos, got, err, want)
			}
		}
	}
}

// TestCanonicalLiteralEdges: the literal fast path takes exactly
// canonString's spelling, wherever in the literal an escape or a raw
// control byte sits.
func TestCanonicalLiteralEdges(t *testing.T) {
	t.Parallel()
	for lit, want := range map[string]bool{
		`"\n"`:                   true, // an escape that ends the literal
		`"\\"`:                   true,
		`"ab\\\\"`:               true, // two escaped backslashes in the tail
		`"\n\\\"\t"`:             true,
		`"\n\/abcdefghijklmnop"`: false, // a non-canonical escape right after another
		`"abcdefgh\n\/ijklmnop"`: false,
		`"a b c d e f g h i j"`:  true, // spaces are not controls
		`"abcdefghij k"`:         true,
	} {
		if got := canon.CanonicalLiteral([]byte(lit)); got != want {
			t.Errorf("canonicalLiteral(%s) = %v, want %v", lit, got, want)
		}
	}
	for pos := range 20 {
		lit := `"` + strings.Repeat("r", pos) + "\x07" + strings.Repeat("s", 20-pos) + `"`
		if canon.CanonicalLiteral([]byte(lit)) {
			t.Errorf("a raw control byte at %d taken as canonical", pos)
		}
	}
}
