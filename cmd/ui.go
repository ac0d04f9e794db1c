package cmd

import (
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/idemhq/idem/internal/ledger"
)

// colorOn says whether to colour what goes to w: --color always, or
// --color auto with w a terminal, NO_COLOR unset and TERM not dumb.
func (a *app) colorOn(w io.Writer) bool {
	switch a.colorFlag {
	case "always":
		return true
	case "never":
		return false
	}
	return a.watched(w) && a.getenv("NO_COLOR") == ""
}

// watched says whether a person watches w: it is a terminal, and TERM is
// not dumb.
func (a *app) watched(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f) && a.getenv("TERM") != "dumb"
}

// ui renders idem's own lines on stderr.
type ui struct {
	w      io.Writer
	quiet  bool
	errTag style
	hint   style
}

func newUI(a *app) *ui {
	on := a.colorOn(a.stderr)
	return &ui{w: a.stderr, errTag: newStyle(on, boldRed, resetBold), hint: newStyle(on, yellow, reset)}
}

// A style colours text with SGR escapes when colour is on: its codes
// before the text, and after it the codes that undo them (22 ends bold,
// 0 the rest). A plain table of codes: a colour library's start-up
// probes the terminal in every process, a run's and a replay's too.
type style struct{ start, end string }

// The SGR codes of the colours idem uses, and of their ends.
const (
	boldRed   = "31;1"
	green     = "32"
	yellow    = "33"
	cyan      = "36"
	reset     = "0"
	resetBold = "0;22"
)

func newStyle(on bool, codes, ends string) style {
	if !on {
		return style{}
	}
	return style{start: "\x1b[" + codes + "m", end: "\x1b[" + ends + "m"}
}

func (s style) paint(text string) string {
	if s.start == "" {
		return text
	}
	return s.start + text + s.end
}

func (u *ui) errorLine(msg, hint string) {
	u.startLine()
	fmt.Fprintf(u.w, "idem: %s %s\n", u.errTag.paint("error:"), oneLine(msg))
	if hint != "" {
		fmt.Fprintf(u.w, "idem: %s %s\n", u.hint.paint("hint:"), oneLine(hint))
	}
}

// noticef prints an idem: line unless --quiet.
func (u *ui) noticef(format string, args ...any) {
	if u.quiet {
		return
	}
	u.startLine()
	fmt.Fprintf(u.w, "idem: %s\n", oneLine(fmt.Sprintf(format, args...)))
}

// hintf prints an idem: hint: line unless --quiet: what to do next
// after a notice.
func (u *ui) hintf(format string, args ...any) {
	if u.quiet {
		return
	}
	u.startLine()
	fmt.Fprintf(u.w, "idem: %s %s\n", u.hint.paint("hint:"), oneLine(fmt.Sprintf(format, args...)))
}

// warnf prints an idem: warning: line unless --quiet.
func (u *ui) warnf(format string, args ...any) {
	if u.quiet {
		return
	}
	u.startLine()
	fmt.Fprintf(u.w, "idem: %s %s\n", u.hint.paint("warning:"), oneLine(fmt.Sprintf(format, args...)))
}

// lineWriter is idem's stderr while a command's output passes through it.
// It remembers whether the last byte written ended a line, so that idem's
// own lines start on a line of their own even after output that did not
// end with a newline (a replayed binary stderr, a prompt, a progress bar).
// The command's bytes themselves pass through unchanged.
type lineWriter struct {
	mu  sync.Mutex
	w   io.Writer
	mid bool // the last byte written was not '\n'
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.w.Write(p)
	if n > 0 {
		l.mid = p[n-1] != '\n'
	}
	return n, err
}

// startLine ends a line left open by earlier output.
func (l *lineWriter) startLine() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mid {
		l.w.Write([]byte{'\n'})
		l.mid = false
	}
}

// startLine makes the next idem: line begin at the start of a line.
func (u *ui) startLine() {
	if lw, ok := u.w.(*lineWriter); ok {
		lw.startLine()
	}
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), ioctlGetTermios)
	return err == nil
}

// statusPainter colours a status on a terminal only: when stdout is one,
// --color allows it and NO_COLOR is unset (or --color always).
func statusPainter(a *app) func(ledger.Status, string) string {
	on := a.colorOn(a.stdout)
	styles := map[ledger.Status]style{
		ledger.StatusSucceeded:  newStyle(on, green, reset),
		ledger.StatusFailed:     newStyle(on, boldRed, resetBold),
		ledger.StatusRetryable:  newStyle(on, yellow, reset),
		ledger.StatusInProgress: newStyle(on, cyan, reset),
	}
	return func(s ledger.Status, text string) string {
		return styles[s].paint(text)
	}
}
