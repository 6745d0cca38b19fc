package canon_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvca/kvca/canon"
)

func TestMessagesClassification(t *testing.T) {
	c := canon.New(nil)
	for body, want := range map[string]bool{
		`{"messages":[{"role":"user","content":"u"}]}`:                                                                    false,
		`{"system":"s","messages":[{"role":"user","content":[{"type":"text","text":"u"},{"type":"image","source":{}}]}]}`: false,
		`{"messages":[{"role":"user","content":"u"},{"role":"assistant","content":"a"}]}`:                                 true,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"tool_result","tool_use_id":"1"}]}]}`:  true,
		// A tool_result nested anywhere else is only text.
		`{"messages":[{"role":"user","content":[{"type":"text","text":"x","tool_result":{"type":"tool_result"}}]}]}`: false,
	} {
		_, info, err := cbr(t, c, canon.Messages, body)
		if err != nil {
			t.Fatal(err)
		}
		if info.Followup != want {
			t.Errorf("%s: followup %v, want %v", body, info.Followup, want)
		}
	}
	for body, want := range map[string]error{
		`{"model":"m"}`:                   canon.ErrNoMessages,
		`{"messages":[]}`:                 canon.ErrNoMessages,
		`{"messages":"hi"}`:               canon.ErrNoMessages,
		`{"messages":[{"content":"x"}]}`:  canon.ErrBadMessage,
		`{"messages":[1]}`:                canon.ErrBadMessage,
		`{"messages":[{"role":"user"}],}`: canon.ErrMalformed,
	} {
		if _, _, err := cbr(t, c, canon.Messages, body); err != want {
			t.Errorf("%s: %v, want %v", body, err, want)
		}
	}
}

// A coding agent resends its history each turn, moving its cache_control
// breakpoint to the newest block; the CBR of every turn must extend the
// previous one's.
func TestMessagesAppendOnlyWithMovingCacheControl(t *testing.T) {
	c := canon.New(nil)
	type block = map[string]any
	system := []block{{"type": "text", "text": "agent instructions", "cache_control": block{"type": "ephemeral"}}}
	var msgs []map[string]any
	prev := ""
	var session uint64
	for turn := 0; turn < 8; turn++ {
		// The breakpoint leaves the older turns.
		for _, m := range msgs {
			for _, b := range m["content"].([]block) {
				delete(b, "cache_control")
			}
		}
		content := []block{{"type": "text", "text": strings.Repeat("q", turn*53), "cache_control": block{"type": "ephemeral"}}}
		if turn%2 == 1 {
			content = append([]block{{"type": "tool_result", "tool_use_id": "t", "content": "r"}}, content...)
		}
		msgs = append(msgs, map[string]any{"role": "user", "content": content})
		body, _ := json.Marshal(map[string]any{"model": "m", "system": system, "messages": msgs, "max_tokens": 100 + turn, "stream": turn%2 == 0})
		got, info, err := cbr(t, c, canon.Messages, string(body))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(got, prev) {
			t.Fatalf("turn %d CBR does not extend turn %d:\n%q\n%q", turn, turn-1, prev, got)
		}
		if strings.Contains(got, "cache_control") || strings.Contains(got, "max_tokens") {
			t.Fatalf("turn %d: %q", turn, got)
		}
		if want := turn > 0; info.Followup != want {
			t.Fatalf("turn %d followup %v", turn, info.Followup)
		}
		if turn == 0 {
			session = info.Session
		} else if info.Session != session || session == 0 {
			t.Fatalf("turn %d session %x, first %x", turn, info.Session, session)
		}
		prev = got
		msgs = append(msgs, map[string]any{"role": "assistant", "content": []block{{"type": "tool_use", "id": "t", "name": "f", "input": block{}}}})
	}
}

// Equal bodies of different APIs never share a block.
func TestMessagesPreamble(t *testing.T) {
	c := canon.New(nil)
	body := `{"model":"m","messages":[{"role":"user","content":"x"}]}`
	chat, _, _ := cbr(t, c, canon.Chat, body)
	msgs, _, _ := cbr(t, c, canon.Messages, body)
	if chat != "chat\n{\"model\":\"m\"}\n{\"content\":\"x\",\"role\":\"user\"}\n" || msgs != "messages\n"+chat[len("chat\n"):] {
		t.Fatalf("%q %q", chat, msgs)
	}
	// cache_control is only dropped from Messages API bodies.
	cc := `{"messages":[{"role":"user","content":"x","cache_control":{}}]}`
	if a, _, _ := cbr(t, c, canon.Chat, cc); !strings.Contains(a, "cache_control") {
		t.Fatalf("chat lost cache_control: %q", a)
	}
	if api, err := canon.ParseAPI("messages"); err != nil || api != canon.Messages || api.String() != "messages" {
		t.Fatal(api, err)
	}
}

func TestSessionKeys(t *testing.T) {
	key := [2]uint64{1, 2}
	c := canon.NewWithOptions(nil, canon.Options{HashKey: key})
	other := canon.NewWithOptions(nil, canon.Options{HashKey: [2]uint64{3, 4}})
	_, r, err := cbr(t, c, canon.Responses, `{"model":"m","previous_response_id":"resp_1","input":"x","prompt_cache_key":"conv-7","user":"alice"}`)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.PreviousResponseID) != "resp_1" || !r.Followup {
		t.Fatalf("previous_response_id %q followup %v", r.PreviousResponseID, r.Followup)
	}
	if r.CacheKey != c.HashSessionKey([]byte("conv-7")) || r.UserKey != c.HashSessionKey([]byte("alice")) || r.CacheKey == 0 || r.UserKey == 0 {
		t.Fatalf("keys %x %x", r.CacheKey, r.UserKey)
	}
	if other.HashSessionKey([]byte("conv-7")) == r.CacheKey {
		t.Fatal("the hash ignores its key")
	}
	// The pooled state forgets the previous request's keys.
	_, r2, _ := cbr(t, c, canon.Responses, `{"input":"x","prompt_cache_key":"","user":7}`)
	if r2.CacheKey != 0 || r2.UserKey != 0 || len(r2.PreviousResponseID) != 0 || r2.Followup {
		t.Fatalf("leaked: %+v", r2)
	}

	_, m, _ := cbr(t, c, canon.Messages, `{"messages":[{"role":"user","content":"x"}],"metadata":{"user_id":"user_abc_session_1"},"user":"ignored"}`)
	if m.UserKey != c.HashSessionKey([]byte("user_abc_session_1")) {
		t.Fatalf("metadata.user_id: %x", m.UserKey)
	}
	_, ch, _ := cbr(t, c, canon.Chat, `{"messages":[{"role":"user","content":"x"}],"user":"bob","previous_response_id":"r"}`)
	if ch.UserKey != c.HashSessionKey([]byte("bob")) || len(ch.PreviousResponseID) != 0 {
		t.Fatalf("chat user %x, previous %q", ch.UserKey, ch.PreviousResponseID)
	}
	// safety_identifier names the end user where user does not, in
	// either order.
	for body, want := range map[string]string{
		`{"messages":[{"role":"user","content":"x"}],"safety_identifier":"carol"}`:              "carol",
		`{"messages":[{"role":"user","content":"x"}],"safety_identifier":"carol","user":"bob"}`: "bob",
		`{"messages":[{"role":"user","content":"x"}],"user":"bob","safety_identifier":"carol"}`: "bob",
		`{"messages":[{"role":"user","content":"x"}],"user":"","safety_identifier":"carol"}`:    "carol",
	} {
		if _, r, _ := cbr(t, c, canon.Chat, body); r.UserKey != c.HashSessionKey([]byte(want)) {
			t.Fatalf("%s: user key %x, want %s's", body, r.UserKey, want)
		}
	}

	// Order: prompt_cache_key, then the headers in SessionHeaders order,
	// then the user.
	hdrs := map[string]string{"session_id": "codex-1", "x-claude-code-session-id": "cc-1"}
	get := func(name string) []byte { return []byte(hdrs[name]) }
	if got := c.SessionKey(&r, get); got != r.CacheKey {
		t.Fatalf("prompt_cache_key not first: %x", got)
	}
	noCache := r
	noCache.CacheKey = 0
	if got := c.SessionKey(&noCache, get); got != c.HashSessionKey([]byte("cc-1")) {
		t.Fatalf("x-claude-code-session-id not before session_id: %x", got)
	}
	hdrs["x-session-id"] = "generic"
	if got := c.SessionKey(&noCache, get); got != c.HashSessionKey([]byte("generic")) {
		t.Fatalf("x-session-id not first: %x", got)
	}
	if got := c.SessionKey(&noCache, func(string) []byte { return nil }); got != r.UserKey {
		t.Fatalf("user not last: %x", got)
	}
	if got := c.SessionKey(&canon.Info{}, nil); got != 0 {
		t.Fatalf("no key: %x", got)
	}
	if h := canon.SessionHeaders(); h != [3]string{"x-session-id", "x-claude-code-session-id", "session_id"} {
		t.Fatal(h)
	}
}

func TestMessagesNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race")
	}
	c := canon.NewWithOptions(nil, canon.Options{HashKey: [2]uint64{5, 6}})
	body := []byte(messagesBody(3000))
	var sink discard
	var info canon.Info
	if err := c.Canonicalize(canon.Messages, body, &sink, &info); err != nil {
		t.Fatal(err)
	}
	get := func(string) []byte { return nil }
	if n := testing.AllocsPerRun(200, func() {
		_ = c.Canonicalize(canon.Messages, body, &sink, &info)
		_ = c.SessionKey(&info, get)
	}); n != 0 {
		t.Fatalf("%v allocs per request", n)
	}
	if !info.Followup || info.UserKey == 0 || info.Messages != 3 {
		t.Fatalf("%+v", info)
	}
}

func messagesBody(n int) string {
	return `{"model":"claude-x","max_tokens":1024,"stream":true,"metadata":{"user_id":"u1"},` +
		`"system":[{"type":"text","text":"You are a coding agent.","cache_control":{"type":"ephemeral"}}],` +
		`"tools":[{"name":"bash","description":"Run a command.","input_schema":{"type":"object","properties":{"cmd":{"type":"string"}}}}],` +
		`"messages":[{"role":"user","content":[{"type":"text","text":"fix the build \"now\" ` + strings.Repeat("x", n) + `"}]},` +
		`{"role":"assistant","content":[{"type":"text","text":"Running it."},{"type":"tool_use","id":"toolu_1","name":"bash","input":{"cmd":"go build ./..."}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok","cache_control":{"type":"ephemeral"}}]}]}`
}

func BenchmarkCanonMessages(b *testing.B) {
	benchCanon(b, canon.Messages, []int{1 << 10, 16 << 10, 128 << 10}, func(n int) []byte { return []byte(messagesBody(n)) })
}
