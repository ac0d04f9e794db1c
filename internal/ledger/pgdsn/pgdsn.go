// Package pgdsn tells a PostgreSQL connection string from a file's path,
// and nothing more: it links no driver, so that an idem that keeps only
// ledger files can still tell which locations are another executable's
// to open (location.Companion).
package pgdsn

import "strings"

// Is reports whether a --ledger value names a PostgreSQL database
// rather than a file: a postgres:// or postgresql:// URL, or a value that
// starts as libpq's keyword/value form does (a word of letters, digits and
// underscores, then '='), or one of nothing but spaces (libpq reads it as
// a connection string with every default).
func Is(s string) bool {
	return IsURL(s) || looksKeywordValue(s)
}

// IsURL reports whether s is a postgres:// or postgresql:// URL.
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// looksKeywordValue: libpq's keywords are all such words, so every string
// libpq reads as keyword/value starts like this; a path ("./a=b.db",
// "/srv/run=1/ledger.db") does not.
func looksKeywordValue(s string) bool {
	s = strings.TrimLeft(s, Spaces)
	if s == "" {
		return true
	}
	i := 0
	for i < len(s) && (s[i] == '_' || 'a' <= s[i] && s[i] <= 'z' || 'A' <= s[i] && s[i] <= 'Z' || i > 0 && '0' <= s[i] && s[i] <= '9') {
		i++
	}
	return i > 0 && strings.HasPrefix(strings.TrimLeft(s[i:], Spaces), "=")
}

// Spaces are what libpq skips between keyword/value pairs (isspace).
const Spaces = " \t\n\r\v\f"
