package kdn

import (
	"strconv"
	"strings"
)

// Stable validation error codes. They are part of kvca's public surface
// (CLI output, HTTP 400 bodies), so existing values must never change.
const (
	CodeMalformedJSON   = "malformed_json"
	CodeDuplicateKey    = "duplicate_key"
	CodeUnknownModel    = "unknown_model"
	CodeUnknownField    = "unknown_field"
	CodeMissingField    = "missing_field"
	CodeNullNotAllowed  = "null_not_allowed"
	CodeInvalidType     = "invalid_type"
	CodeInvalidEnum     = "invalid_enum"
	CodeInvalidProfile  = "invalid_runtime_profile"
	CodeContractVersion = "contract_version_mismatch"
	CodePattern         = "pattern_mismatch"
	CodeTooShort        = "too_short"
	CodeBlank           = "blank_string"
	CodeOutOfRange      = "out_of_range"
	CodeInvalidDatetime = "invalid_datetime"
	CodeNaiveDatetime   = "naive_datetime"
	CodeNonUTCDatetime  = "non_utc_datetime"
	CodeDerivedID       = "derived_id_mismatch"
	CodeDuplicateItem   = "duplicate_item"
	CodeRule            = "rule_violation"
)

// ValidationError reports the first contract rule a message breaks. It is
// named after what it is rather than "ContractError" because that name
// belongs to a wire model (the alias of ContractErrorDetail).
type ValidationError struct {
	Code    string // stable machine-readable code (Code* constants)
	Field   string // dotted path of the offending field, "" for the message itself
	Rule    string // short rule identifier, e.g. "O2" or "pattern:endpoint_id"
	Message string // fixed, safe text; never contains input values
}

func (e *ValidationError) Error() string { return e.Line() }

// Line renders the error as one line of plain text. Field paths can contain
// client-chosen key names (unknown fields), so the path is quoted when it is
// not plain to keep the output one line and free of control characters.
func (e *ValidationError) Line() string {
	field := e.Field
	if field == "" {
		field = "$"
	}
	return "code=" + e.Code + " field=" + safeToken(field) + " rule=" + safeToken(e.Rule) + ": " + e.Message
}

// safeToken keeps printable ASCII tokens as they are and quotes anything else,
// truncated so that a hostile key cannot flood a log line.
func safeToken(s string) string {
	const max = 96
	plain := len(s) <= max
	for i := 0; plain && i < len(s); i++ {
		c := s[i]
		plain = c > ' ' && c < 0x7f && c != '"'
	}
	if plain {
		return s
	}
	if len(s) > max {
		s = s[:max] + "..."
	}
	return strconv.QuoteToASCII(s)
}

func verr(code, field, rule, msg string) *ValidationError {
	return &ValidationError{Code: code, Field: field, Rule: rule, Message: msg}
}

func joinPath(base, key string) string {
	if base == "" {
		return key
	}
	return base + "." + key
}

func indexPath(base string, i int) string {
	return base + "[" + strconv.Itoa(i) + "]"
}

// keyPath names an unknown key inside base; it goes through safeToken at
// print time, so it is kept raw here.
func keyPath(base, key string) string {
	if strings.ContainsAny(key, ".[]") {
		key = strconv.Quote(key)
	}
	return joinPath(base, key)
}
