package cmd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
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
	bw   *bufio.Writer
	err  error
	what string // what is written, for the error
}

func newFlusher(w io.Writer, what string) *flusher {
	return &flusher{bw: bufio.NewWriterSize(w, 64<<10), what: what}
}

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
		return &exitError{code: exitcode.IOErr, msg: fmt.Sprintf("write %s: %v", f.what, ferr)}
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
