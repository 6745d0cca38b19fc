package canon

import (
	"github.com/dchest/siphash"
	"github.com/valyala/fastjson"
)

// SessionHeaders are the request headers, in order of preference, by which
// clients name their conversation: a generic one, Claude Code's, and
// Codex's. SessionKey consults them after prompt_cache_key and before the
// end user's id. Header names are case-insensitive; these are lowercase.
//
// It is a function returning an array, not a variable, so that no caller
// can change the list and a range over it allocates nothing.
func SessionHeaders() [3]string {
	return [3]string{"x-session-id", "x-claude-code-session-id", "session_id"}
}

// HashSessionKey is the keyed hash of a session key's bytes (a
// prompt_cache_key, a session header's value, a user id), never 0; 0 for
// an empty key, which names nothing.
func (c *Canonicalizer) HashSessionKey(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	h := siphash.Hash(c.k0, c.k1, b)
	if h == 0 {
		h = 1 // 0 means "no key"
	}
	return h
}

func (c *Canonicalizer) hashString(v *fastjson.Value) uint64 {
	if v == nil || v.Type() != fastjson.TypeString {
		return 0
	}
	return c.HashSessionKey(v.GetStringBytes())
}

// SessionKey returns the hash of the name the request gives its
// conversation, 0 if it gives none: its prompt_cache_key, else the first
// non-empty header of SessionHeaders, else its end user's id. header
// returns a request header's value (nil or empty when absent); nil means
// the request has no headers to consult. It allocates nothing.
func (c *Canonicalizer) SessionKey(info *Info, header func(name string) []byte) uint64 {
	if info.CacheKey != 0 {
		return info.CacheKey
	}
	if header != nil {
		for _, name := range SessionHeaders() {
			if h := c.HashSessionKey(header(name)); h != 0 {
				return h
			}
		}
	}
	return info.UserKey
}
