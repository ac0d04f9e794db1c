package ledger

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// TailMax is how much of the end of an attempt's stderr is kept with the
// attempt: enough for the error a failed command prints last.
const TailMax = 4 << 10

// ReasonMax bounds Record.Reason, the last stderr line a listing shows.
const ReasonMax = 200

// Tail returns the last TailMax bytes of b (b itself when shorter).
func Tail(b []byte) []byte {
	if len(b) > TailMax {
		return b[len(b)-TailMax:]
	}
	return b
}

// LastLine returns the last line of tail that holds more than white space,
// trimmed and cut to ReasonMax bytes: what a listing shows of why a
// command failed. Invalid UTF-8 and NUL become U+FFFD (a text column takes
// neither); other control characters are left for the display to escape.
func LastLine(tail []byte) string {
	for len(tail) > 0 {
		i := bytes.LastIndexByte(tail, '\n')
		line := bytes.TrimSpace(tail[i+1:])
		if len(line) > 0 {
			if len(line) > ReasonMax {
				line = cutRune(line[:ReasonMax])
			}
			// A text column takes valid UTF-8 without NUL (PostgreSQL).
			return strings.ToValidUTF8(strings.ReplaceAll(string(line), "\x00", "\uFFFD"), "\uFFFD")
		}
		if i < 0 {
			break
		}
		tail = tail[:i]
	}
	return ""
}

// cutRune drops the first bytes of a rune that a cut at the end of b left
// incomplete.
func cutRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// ReasonArg is the SQL argument for Record.Reason from a stderr tail: its
// last line, or NULL (nil) when it has none.
func ReasonArg(tail []byte) any {
	if l := LastLine(tail); l != "" {
		return l
	}
	return nil
}
