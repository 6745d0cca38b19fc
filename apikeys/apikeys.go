// Package apikeys authenticates clients by API key. The keys file lists
// the SHA-256 of each key with the tenant it belongs to and that tenant's
// limits; the keys themselves are never stored, logged or exported. A
// Store holds the loaded file behind an atomic pointer, so a reload swaps
// the whole set at once while lookups go on, and a lookup allocates
// nothing.
package apikeys

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// MaxLimit bounds rpm= and tpm=: the quota arithmetic is exact up to it.
const MaxLimit = 100_000_000

// Tenant is who a key belongs to, with the limits the keys file gives it.
// A zero limit means unlimited.
type Tenant struct {
	Name string
	// ID is stable for a name for the life of a Store (reloads keep it),
	// and dense from 0: an index for per-tenant state such as quotas.
	ID  int
	RPM int64 // requests per minute
	TPM int64 // tokens (prompt + completion) per minute
}

// Set is one parsed keys file; it never changes once built.
type Set struct {
	// byPrefix maps the first 8 bytes of a key's digest to its entries;
	// the full digest is then compared in constant time.
	byPrefix map[uint64][]entry
	tenants  []*Tenant // indexed by ID, nil for IDs this file lacks
	keys     int
}

type entry struct {
	sum    [sha256.Size]byte
	tenant *Tenant
}

// Keys is how many keys the set holds.
func (s *Set) Keys() int { return s.keys }

// Tenants returns the set's tenants, ordered by ID.
func (s *Set) Tenants() []*Tenant {
	out := make([]*Tenant, 0, len(s.tenants))
	for _, t := range s.tenants {
		if t != nil {
			out = append(out, t)
		}
	}
	return out
}

// Lookup finds the tenant of a presented key. It hashes the key and
// compares digests in constant time, so neither the key nor how much of
// a stored digest it matches shows in the time taken.
func (s *Set) Lookup(key []byte) (*Tenant, bool) {
	if s == nil || len(key) == 0 {
		return nil, false
	}
	sum := sha256.Sum256(key)
	var found *Tenant
	for _, e := range s.byPrefix[binary.LittleEndian.Uint64(sum[:8])] {
		if subtle.ConstantTimeCompare(e.sum[:], sum[:]) == 1 {
			found = e.tenant
		}
	}
	return found, found != nil
}

// Hash returns the keys-file digest of a key: "sha256:" and 64 lowercase
// hex digits.
func Hash(key []byte) string {
	sum := sha256.Sum256(key)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Line returns the keys-file line for key; rpm and tpm are left out when 0.
func Line(key []byte, tenant string, rpm, tpm int64) string {
	var b strings.Builder
	b.WriteString(Hash(key))
	b.WriteString(" tenant=")
	b.WriteString(tenant)
	if rpm > 0 {
		b.WriteString(" rpm=")
		b.WriteString(strconv.FormatInt(rpm, 10))
	}
	if tpm > 0 {
		b.WriteString(" tpm=")
		b.WriteString(strconv.FormatInt(tpm, 10))
	}
	return b.String()
}

// ValidTenant reports whether name may name a tenant: 1 to 64 of
// A-Z a-z 0-9 . _ -, so that it is safe as a metric label and in logs.
func ValidTenant(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ParseError is a keys file's first error; it names the line, never its
// content (a line might hold a key pasted by mistake).
type ParseError struct {
	Line int
	Msg  string
}

func (e *ParseError) Error() string { return fmt.Sprintf("keys file line %d: %s", e.Line, e.Msg) }

// ids assigns tenant IDs; a Store keeps one across reloads.
type ids struct {
	byName map[string]int
	names  []string
}

func (r *ids) id(name string) int {
	if r.byName == nil {
		r.byName = map[string]int{}
	}
	if id, ok := r.byName[name]; ok {
		return id
	}
	id := len(r.names)
	r.byName[name] = id
	r.names = append(r.names, name)
	return id
}

// Parse reads a keys file. Each line is
//
//	sha256:<64 hex digits> tenant=<name> [rpm=<n>] [tpm=<n>]
//
// fields separated by blanks; blank lines and lines starting with # are
// ignored, as is anything after a # that follows a blank. Several keys
// may belong to one tenant (to rotate a key, list the new one beside the
// old); the limits belong to the tenant, so its lines must not disagree
// on them, and a line that gives none takes the others'.
func Parse(r io.Reader) (*Set, error) {
	var reg ids
	return parse(r, &reg)
}

func parse(r io.Reader, reg *ids) (*Set, error) {
	s := &Set{byPrefix: map[uint64][]entry{}}
	type lim struct {
		rpm, tpm         int64
		rpmLine, tpmLine int
	}
	limits := map[string]*lim{}
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		if i := bytes.Index(line, []byte(" #")); i >= 0 {
			line = line[:i]
		}
		if i := bytes.Index(line, []byte("\t#")); i >= 0 {
			line = line[:i]
		}
		fields := bytes.Fields(line)
		if len(fields) == 0 || fields[0][0] == '#' {
			continue
		}
		fail := func(format string, a ...any) error {
			return &ParseError{Line: n, Msg: fmt.Sprintf(format, a...)}
		}
		h := fields[0]
		if !bytes.HasPrefix(h, []byte("sha256:")) {
			return nil, fail("must start with sha256:<64 hex digits> (the digest of the key, never the key itself; `kvca keys hash` prints it)")
		}
		hx := h[len("sha256:"):]
		var sum [sha256.Size]byte
		if len(hx) != 2*sha256.Size {
			return nil, fail("the digest has %d hex digits, want 64", len(hx))
		}
		if _, err := hex.Decode(sum[:], bytes.ToLower(hx)); err != nil {
			return nil, fail("the digest is not hexadecimal")
		}
		if prev, dup := seen[sum]; dup {
			return nil, fail("the same key is already on line %d", prev)
		}
		seen[sum] = n
		var tenant string
		var rpm, tpm int64
		var hasRPM, hasTPM bool
		for _, f := range fields[1:] {
			k, v, ok := bytes.Cut(f, []byte("="))
			if !ok {
				return nil, fail("field %q is not name=value", f)
			}
			switch string(k) {
			case "tenant":
				if tenant != "" {
					return nil, fail("tenant= given twice")
				}
				tenant = string(v)
				if !ValidTenant(tenant) {
					return nil, fail("tenant %q must be 1-64 of A-Z a-z 0-9 . _ -", v)
				}
			case "rpm", "tpm":
				x, err := strconv.ParseInt(string(v), 10, 64)
				if err != nil || x <= 0 || x > MaxLimit {
					return nil, fail("%s=%s must be a whole number from 1 to %d", k, v, MaxLimit)
				}
				if k[0] == 'r' {
					if hasRPM {
						return nil, fail("rpm= given twice")
					}
					rpm, hasRPM = x, true
				} else {
					if hasTPM {
						return nil, fail("tpm= given twice")
					}
					tpm, hasTPM = x, true
				}
			default:
				return nil, fail("unknown field %q (want tenant=, rpm=, tpm=)", k)
			}
		}
		if tenant == "" {
			return nil, fail("missing tenant=<name>")
		}
		l := limits[tenant]
		if l == nil {
			l = &lim{}
			limits[tenant] = l
		}
		if hasRPM {
			if l.rpmLine != 0 && l.rpm != rpm {
				return nil, fail("tenant %s has rpm=%d on line %d: a tenant's lines must agree on its limits", tenant, l.rpm, l.rpmLine)
			}
			l.rpm, l.rpmLine = rpm, n
		}
		if hasTPM {
			if l.tpmLine != 0 && l.tpm != tpm {
				return nil, fail("tenant %s has tpm=%d on line %d: a tenant's lines must agree on its limits", tenant, l.tpm, l.tpmLine)
			}
			l.tpm, l.tpmLine = tpm, n
		}
		id := reg.id(tenant)
		for len(s.tenants) <= id {
			s.tenants = append(s.tenants, nil)
		}
		t := s.tenants[id]
		if t == nil {
			t = &Tenant{Name: tenant, ID: id}
			s.tenants[id] = t
		}
		p := binary.LittleEndian.Uint64(sum[:8])
		s.byPrefix[p] = append(s.byPrefix[p], entry{sum: sum, tenant: t})
		s.keys++
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &ParseError{Line: n + 1, Msg: "line longer than 64 KiB"}
		}
		return nil, err
	}
	for _, t := range s.tenants {
		if t != nil {
			t.RPM, t.TPM = limits[t.Name].rpm, limits[t.Name].tpm
		}
	}
	// Tenants are sized to every ID ever assigned, so an ID from an older
	// set still indexes per-tenant state sized from this one.
	for len(s.tenants) < len(reg.names) {
		s.tenants = append(s.tenants, nil)
	}
	return s, nil
}

// Credential extracts the key a request presents in one header:
// "Authorization: Bearer <key>" (OpenAI's clients) or "x-api-key: <key>"
// (Anthropic's). name is matched without regard to case; ok is false for
// any other header or an empty key. The result aliases value.
func Credential(name, value []byte) (key []byte, ok bool) {
	switch len(name) {
	case 13:
		if !equalFold(name, "authorization") {
			return nil, false
		}
		if len(value) < 7 || !equalFold(value[:7], "bearer ") {
			return nil, false
		}
		key = bytes.TrimSpace(value[7:])
	case 9:
		if !equalFold(name, "x-api-key") {
			return nil, false
		}
		key = bytes.TrimSpace(value)
	default:
		return nil, false
	}
	return key, len(key) > 0
}

// IsCredentialHeader reports whether a request header carries a client
// credential that must not reach a backend: Authorization, x-api-key, and
// Azure's api-key. The edge drops them from the upstream head and sends
// AppendBackendAuth's instead.
func IsCredentialHeader(name []byte) bool {
	switch len(name) {
	case 13:
		return equalFold(name, "authorization")
	case 9:
		return equalFold(name, "x-api-key")
	case 7:
		return equalFold(name, "api-key")
	}
	return false
}

// AppendBackendAuth appends the header line that authenticates kvca to a
// backend started with an API key (vLLM's --api-key checks a Bearer
// token); nothing when key is empty.
func AppendBackendAuth(b []byte, key string) []byte {
	if key == "" {
		return b
	}
	b = append(b, "Authorization: Bearer "...)
	b = append(b, key...)
	return append(b, "\r\n"...)
}

func equalFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
