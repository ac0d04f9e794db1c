// Package shquote quotes words for a POSIX shell, for the commands that
// idem's hints suggest: a path with spaces or a "$(...)" in it must come
// out of a copy and paste as the same path, never run anything.
package shquote

import "strings"

// Word returns s as one word of a POSIX shell: as it is when it holds
// only characters no shell treats specially, else in single quotes.
func Word(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:,+@-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
