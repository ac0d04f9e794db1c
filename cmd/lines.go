package cmd

import (
	"io"
	"sync"
)

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
