package cmd

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/internal/ledger"
)

// The cells of inspect's tables and details: how a record's fields read
// for people, in a listing's row or one record's detail.

// statusCell is the record's status, and whether its TTL or its lease
// ran out at now.
func statusCell(r *ledger.Record, now time.Time) string {
	s := string(r.Status)
	switch {
	case r.Expired(now):
		s += " (expired)"
	case r.Status == ledger.StatusInProgress && !r.Live(now, nil):
		s += " (lease expired)"
	}
	return s
}

// exitCell is the exit code of the record's last ended attempt, "-"
// before any ended.
func exitCell(r *ledger.Record) string {
	if !r.HasExit {
		return "-"
	}
	return strconv.Itoa(r.ExitCode)
}

// durationCell is how long the record's outcome took, or, in progress,
// how long it has run so far (with a +).
func durationCell(r *ledger.Record, now time.Time) string {
	if r.Status == ledger.StatusInProgress {
		return span(now.Sub(r.Started)) + "+"
	}
	return span(r.Duration)
}

// reason says why a failed or retryable record failed, for people: idem's
// own classification where there is one, else the exit code and the last
// line the command wrote to stderr. Other records have none ("").
func reason(r *ledger.Record) string {
	if r.Status != ledger.StatusFailed && r.Status != ledger.StatusRetryable {
		return ""
	}
	var why string
	switch r.Class {
	case ledger.ClassTimeout:
		why = fmt.Sprintf("timeout (exit %d)", r.ExitCode)
	case ledger.ClassInterrupted:
		why = "interrupted"
		if r.ExitCode > 128 {
			why += " by " + signalName(syscall.Signal(r.ExitCode-128))
		}
	case ledger.ClassAbandoned:
		why = "abandoned: its idem died or lost the lease"
	default:
		if !r.HasExit {
			return ""
		}
		why = fmt.Sprintf("exit %d", r.ExitCode)
		if r.Reason != "" {
			why += ": " + r.Reason
		}
	}
	if r.Status == ledger.StatusFailed && r.Class != ledger.ClassPermanent && r.Class != "" && r.Attempts >= r.MaxAttempts {
		why = fmt.Sprintf("budget spent (%d/%d): %s", r.Attempts, r.MaxAttempts, why)
	}
	return why
}

// escapeControls shows control characters (and invalid UTF-8) as escapes,
// so a stored stderr cannot move the terminal's cursor or change its
// colours, nor bidirectional overrides reorder what is shown; with
// keepLines, newlines and tabs stay as they are.
func escapeControls(s string, keepLines bool) string {
	if printableASCII(s) {
		return s // most of what a ledger holds: keys, hosts, paths
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		c, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLines && (c == '\n' || c == '\t'):
			b.WriteRune(c)
		case c == '\r' && keepLines && i+1 < len(s) && s[i+1] == '\n':
			// CRLF line ends: the CR says nothing
		case c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0):
			fmt.Fprintf(&b, `\x%02x`, c)
		case c == 0x61c || c == 0x200e || c == 0x200f || (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069):
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// printableASCII reports whether s is printable ASCII only, which
// escapeControls leaves as it is.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// cut shortens s to at most n runes, marking the cut with "...".
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-3]) + "..."
}

// orDash is s, or "-" for an empty cell.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// stampIn is stamp in the zone loc.
func stampIn(t, now time.Time, loc *time.Location) string {
	if loc == nil {
		loc = time.UTC
	}
	d := now.Sub(t)
	rel := age(d) + " ago"
	if d < 0 {
		rel = "in " + age(-d)
	}
	return fmt.Sprintf("%s (%s)", t.In(loc).Format(timeFormat), rel)
}

// stderrTail returns the end of the record's stderr: its last attempt's
// own tail, or for a record written before tails were kept, the end of
// the stored stderr; total is the size of the stored stderr when it is
// known to hold the tail, else of the tail. ok is false when nothing was
// stored or the command wrote nothing to stderr.
func stderrTail(r *ledger.Record, hist []ledger.Attempt) (tail []byte, total int, ok bool) {
	if !r.OutputStored {
		return nil, 0, false
	}
	if n := len(hist); n > 0 && hist[n-1].StderrTail != nil {
		tail = hist[n-1].StderrTail
		total = len(tail)
		if !r.StderrTruncated && len(r.Stderr) >= len(tail) && r.Status != ledger.StatusInProgress {
			total = len(r.Stderr)
		}
		return tail, total, len(tail) > 0
	}
	tail = ledger.Tail(r.Stderr)
	return tail, len(r.Stderr), len(tail) > 0
}

// stderrTailJSON is the detail's stderr_tail: the tail as text (invalid
// UTF-8 becomes U+FFFD), null when none is stored.
func stderrTailJSON(r *ledger.Record, hist []ledger.Attempt) *string {
	tail, _, ok := stderrTail(r, hist)
	if !ok {
		return nil
	}
	return ptr(string(tail))
}
