package cmd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/ledger"
)

// flushRows is the most rows the listing buffers before it writes them.
const flushRows = 256

// flushEvery is how many rows the listing buffers: never more than a page,
// so that each page's rows reach the reader before the next page is read.
func flushEvery(f ledger.ListFilter) int { return min(flushRows, f.Pages()) }

// reasonWidth is how much of a reason a table cell shows; --json and
// inspect KEY show it whole.
const reasonWidth = 60

// flusher buffers a listing's output and keeps the first write error, so
// a listing that streams stops at a closed or failing output.
type flusher struct {
	bw  *bufio.Writer
	err error
}

func newFlusher(w io.Writer) *flusher { return &flusher{bw: bufio.NewWriterSize(w, 64<<10)} }

func (f *flusher) Write(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	n, err := f.bw.Write(p)
	f.err = err
	return n, err
}

func (f *flusher) flush() error {
	if f.err == nil {
		f.err = f.bw.Flush()
	}
	return f.err
}

// done flushes and returns err, or the first write error as an I/O error.
func (f *flusher) done(err error) error {
	ferr := f.flush()
	if err != nil && err != ferr {
		return err
	}
	if ferr != nil {
		return &exitError{code: exitcode.IOErr, msg: fmt.Sprintf("write the listing: %v", ferr)}
	}
	return nil
}

// streamTable writes a table a batch of rows at a time. Columns are
// padded to the widest cell seen so far, so widths only grow: the first
// rows need not wait for the last.
type streamTable struct {
	w      *flusher
	paint  func(ledger.Status, string) string
	widths []int
	rows   [][]string
	recs   []*ledger.Record // nil for the header
}

func (t *streamTable) add(r *ledger.Record, row []string) {
	t.rows, t.recs = append(t.rows, row), append(t.recs, r)
}

// flush writes the buffered rows and hands them to the writer's reader.
func (t *streamTable) flush() error {
	for _, row := range t.rows {
		for i, cell := range row {
			if i >= len(t.widths) {
				t.widths = append(t.widths, 0)
			}
			t.widths[i] = max(t.widths[i], utf8.RuneCountInString(cell))
		}
	}
	var b strings.Builder
	for n, row := range t.rows {
		b.Reset()
		for i, cell := range row {
			pad := t.widths[i] - utf8.RuneCountInString(cell)
			if i == 1 && t.recs[n] != nil && t.paint != nil {
				cell = t.paint(t.recs[n].Status, cell)
			}
			if i == len(row)-1 {
				b.WriteString(strings.TrimRight(cell, " "))
				break
			}
			b.WriteString(cell)
			b.WriteString(strings.Repeat(" ", pad+2))
		}
		b.WriteString("\n")
		io.WriteString(t.w, strings.TrimRight(b.String(), " \n")+"\n")
	}
	t.rows, t.recs = t.rows[:0], t.recs[:0]
	return t.w.flush()
}

// writeJSONStream writes the records each yields as the JSON array that
// writeJSON would, one element at a time.
func writeJSONStream(w *flusher, each func(func(*ledger.Record) error) error, now time.Time, every int) error {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("  ", "  ")
	n := 0
	err := each(func(r *ledger.Record) error {
		b.Reset()
		if err := enc.Encode(toRecordJSON(r, now)); err != nil {
			return err
		}
		sep := ",\n  "
		if n == 0 {
			sep = "[\n  "
		}
		n++
		io.WriteString(w, sep+strings.TrimSuffix(b.String(), "\n"))
		if n%every == 0 {
			return w.flush()
		}
		return w.err
	})
	if err != nil {
		return err
	}
	if n == 0 {
		_, err = io.WriteString(w, "[]\n")
	} else {
		_, err = io.WriteString(w, "\n]\n")
	}
	return err
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
// colours; with keepLines, newlines and tabs stay as they are.
func escapeControls(s string, keepLines bool) string {
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
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// cut shortens s to at most n runes, marking the cut with "...".
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-3]) + "..."
}

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
