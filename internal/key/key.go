// Package key validates idempotency keys and builds valid keys from
// arbitrary parts.
//
// A key is 8–128 bytes, each an ASCII letter, digit, ':', '_', '-' or '.'.
// Keys name an event ("evt:release-42:notify", "backup:2026-12-02"), never an
// attempt, so the rule is deliberately narrow: a key is safe to print, to put
// in a file name or an environment variable, and to pass on to downstream APIs
// that accept idempotency keys.
package key

import (
	"fmt"
	"strconv"
	"strings"
)

// Length limits of a key, in bytes (every allowed character is one byte).
const (
	MinLen = 8
	MaxLen = 128
)

// Rule is the key rule in words, as used in error messages and help text.
const Rule = "8-128 characters of letters, digits, ':', '_', '-', '.'"

// The allowed bytes as two 64-bit masks: bit c of maskLo for bytes 0-63, bit
// c-64 of maskHi for bytes 64-127. Constants rather than a [256]bool table so
// there is no package state at all, and the lookup is a shift and an and.
const (
	maskLo uint64 = 1<<'-' | 1<<'.' | (1<<10-1)<<'0' | 1<<':'
	maskHi uint64 = (1<<26-1)<<('A'-64) | 1<<('_'-64) | (1<<26-1)<<('a'-64)
)

// allowed reports whether c may appear in a key.
func allowed(c byte) bool {
	switch {
	case c < 64:
		return maskLo>>c&1 != 0
	case c < 128:
		return maskHi>>(c-64)&1 != 0
	}
	return false
}

// InvalidError reports a key that breaks the key rule.
type InvalidError struct {
	// Key is the rejected key, unmodified (it may hold anything; Error quotes
	// and shortens it).
	Key string
	// Reason says how Key breaks the rule: "got N" for a bad length, "byte I
	// is C" (1-based) for the first disallowed byte, or both joined by "; ".
	Reason string
}

// Error names the rule and the reason. The key is quoted with Go escapes
// (ASCII only, one line) and, beyond 40 bytes, shortened to its first 40
// bytes followed by "..." and its length.
func (e *InvalidError) Error() string {
	return fmt.Sprintf("invalid key %s: must be %s (%s)", quote(e.Key), Rule, e.Reason)
}

// quoteMax is how many bytes of a rejected key an error message shows.
const quoteMax = 40

// quote returns k quoted for a one-line terminal message.
func quote(k string) string {
	if len(k) <= quoteMax {
		return strconv.QuoteToASCII(k)
	}
	return strconv.QuoteToASCII(k[:quoteMax]) + "...(" + strconv.Itoa(len(k)) + " bytes)"
}

// Validate returns nil if k is a valid key, and otherwise a *InvalidError
// naming the rule, the length if it is out of range and the first disallowed
// byte if there is one.
func Validate(k string) error {
	bad := -1
	for i := 0; i < len(k); i++ {
		if !allowed(k[i]) {
			bad = i
			break
		}
	}
	lenOK := len(k) >= MinLen && len(k) <= MaxLen
	if lenOK && bad < 0 {
		return nil
	}
	return &InvalidError{Key: k, Reason: reason(k, lenOK, bad)}
}

// reason describes the failures Validate found; it is off the fast path.
func reason(k string, lenOK bool, bad int) string {
	var r []string
	if !lenOK {
		r = append(r, "got "+strconv.Itoa(len(k)))
	}
	if bad >= 0 {
		r = append(r, "byte "+strconv.Itoa(bad+1)+" is "+describe(k[bad]))
	}
	return strings.Join(r, "; ")
}

// describe renders a disallowed byte for a message: a quoted ASCII character
// (with Go escapes for control characters) or the hex value of a non-ASCII
// byte, which is usually the first byte of a UTF-8 sequence.
func describe(c byte) string {
	if c < 0x80 {
		return strconv.QuoteRuneToASCII(rune(c))
	}
	return fmt.Sprintf("0x%02x (non-ASCII)", c)
}
