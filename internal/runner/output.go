package runner

import (
	"io"
	"os"

	"github.com/idemhq/idem/internal/ledger"
)

// capture keeps the first max bytes written to it and notes whether more
// came. A capture made by newTailCapture also keeps the last
// ledger.TailMax bytes past max, so that the end of a long stderr, where a
// failing command says why, is known whatever was cut.
type capture struct {
	buf       []byte
	max       int64
	truncated bool
	keepTail  bool
	tail      []byte // with keepTail: the end of what came past max
}

func newCapture(max int64) *capture {
	return &capture{max: max}
}

func newTailCapture(max int64) *capture {
	return &capture{max: max, keepTail: true}
}

// Tail returns the last ledger.TailMax bytes written (nil for a nil
// capture: nothing is stored).
func (c *capture) Tail() []byte {
	if c == nil {
		return nil
	}
	if len(c.tail) == 0 {
		return ledger.NonNil(ledger.Tail(c.buf))
	}
	if len(c.tail) >= ledger.TailMax {
		return ledger.Tail(c.tail)
	}
	head := ledger.Tail(c.buf)
	head = head[max(0, len(head)-(ledger.TailMax-len(c.tail))):]
	return append(append([]byte{}, head...), c.tail...)
}

// keep adds p, which came past max, to the tail.
func (c *capture) keep(p []byte) {
	if !c.keepTail || len(p) == 0 {
		return
	}
	if len(p) >= ledger.TailMax {
		c.tail = append(c.tail[:0], p[len(p)-ledger.TailMax:]...)
		return
	}
	if over := len(c.tail) + len(p) - 2*ledger.TailMax; over > 0 {
		c.tail = append(c.tail[:0], c.tail[over:]...)
	}
	c.tail = append(c.tail, p...)
}

func (c *capture) Write(p []byte) (int, error) {
	if c == nil {
		return len(p), nil
	}
	room := c.max - int64(len(c.buf))
	if room <= 0 {
		if len(p) > 0 {
			c.truncated = true
		}
		c.keep(p)
		return len(p), nil
	}
	if int64(len(p)) > room {
		c.buf = append(c.buf, p[:room]...)
		c.truncated = true
		c.keep(p[room:])
		return len(p), nil
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// tee streams a child's output to idem's own stream and to a capture. A
// failed write to the stream (a closed pipe: `idem run ... | head`) stops
// streaming but never stops capturing, so the child runs on and the record
// is kept.
type tee struct {
	live    io.Writer // nil: not streamed
	liveErr error
	capture *capture
}

func (t *tee) Write(p []byte) (int, error) {
	if t.live != nil && t.liveErr == nil {
		if _, err := t.live.Write(p); err != nil {
			t.liveErr = err
		}
	}
	t.capture.Write(p)
	return len(p), nil
}

// teeBuffer is what a tee reads from the child's pipe at once: a whole pipe
// buffer (see pipeSize) in one read.
const teeBuffer = 1 << 20

// pipeSize is what the child's output pipe is grown to (Linux's default is
// 64 KiB, and 1 MiB the most an unprivileged process may ask for): fewer,
// larger reads and writes and fewer switches between the child and idem.
const pipeSize = 1 << 20

// ReadFrom is how os/exec's copying goroutine feeds the tee (io.Copy
// prefers it): one buffer for the whole attempt, and reads as large as the
// pipe, where io.Copy would read 32 KiB at a time. Once nothing more is to
// be captured, the rest goes from the pipe to idem's own stream by
// splice(2) when that stream is a file or /dev/null: the kernel moves it
// without copying it through idem.
func (t *tee) ReadFrom(r io.Reader) (int64, error) {
	growPipe(r)
	buf := make([]byte, teeBuffer)
	var n int64
	spliceable := true
	for {
		if spliceable && t.capture.full() && t.liveErr == nil {
			m, handled, err := spliceOut(r, t.live)
			n += m
			if m > 0 && t.capture != nil {
				t.capture.truncated = true
			}
			switch {
			case handled && err == nil:
				return n, nil // the pipe is at its end
			case handled:
				t.liveErr = err // as Write does: stop streaming, keep draining
			}
			spliceable = false
		}
		m, err := r.Read(buf)
		if m > 0 {
			t.Write(buf[:m])
			n += int64(m)
		}
		switch {
		case err == io.EOF:
			return n, nil
		case err != nil:
			return n, err
		}
	}
}

// full reports whether c keeps nothing more: it is at its limit, or it is
// nil (--no-output).
func (c *capture) full() bool {
	return c == nil || int64(len(c.buf)) >= c.max && !c.keepTail
}

// spool holds an attempt's stdout (or stderr) back for --stdout final (or
// --stderr final): in memory up to
// a small size, then in an unlinked private temp file.
type spool struct {
	mem  []byte
	file *os.File
	err  error
}

const spoolMemory = 64 << 10

func (s *spool) Write(p []byte) (int, error) {
	if s.err != nil {
		return len(p), nil
	}
	if s.file == nil && len(s.mem)+len(p) <= spoolMemory {
		s.mem = append(s.mem, p...)
		return len(p), nil
	}
	if s.file == nil {
		f, err := os.CreateTemp("", "idem-stdout-*")
		if err != nil {
			s.err = err
			return len(p), nil
		}
		os.Remove(f.Name())
		s.file = f
		if _, err := f.Write(s.mem); err != nil {
			s.err = err
		}
		s.mem = nil
	}
	if _, err := s.file.Write(p); err != nil {
		s.err = err
	}
	return len(p), nil
}

// emit copies the held bytes to w and releases the spool.
func (s *spool) emit(w io.Writer) error {
	defer s.discard()
	if s.err != nil {
		return s.err
	}
	if s.file == nil {
		_, err := w.Write(s.mem)
		return err
	}
	if _, err := s.file.Seek(0, io.SeekStart); err != nil {
		return err
	}
	_, err := io.Copy(w, s.file)
	return err
}

func (s *spool) discard() {
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
	s.mem = nil
}
