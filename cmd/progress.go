package cmd

import (
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/idemhq/idem/internal/runner"
)

// clearLine returns the cursor to the start of the line and erases it.
const clearLine = "\r\x1b[K"

// progress renders runner events as one status line on a terminal's
// stderr, rewritten in place (carriage return, erase) and erased when the
// backoff or wait is over, so that nothing of it stays in the scrollback.
// During a backoff it counts down once a second.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	now   func() time.Time
	fresh func()        // starts a line of its own before the first status line
	shown string        // the line on screen, "" for none
	stop  chan struct{} // ends the countdown of the current backoff
}

// newProgress returns the Options.Progress callback for stderr, or nil
// when stderr is not a terminal (or --quiet): logs and pipes get no
// status lines.
// When stderr is not a terminal (cron mail, CI logs, a daemon's journal)
// it is a log instead: one line per backoff, per wait for another owner
// and per takeover, so that a long pause does not look like a hang.
func newProgress(w io.Writer, terminal, quiet bool, fresh func()) func(runner.Event) {
	if quiet {
		return nil
	}
	if !terminal {
		l := &progressLog{w: w, fresh: fresh}
		return l.event
	}
	p := &progress{w: w, now: time.Now, fresh: fresh}
	return p.event
}

// progressLog writes runner events as whole lines, for stderr that is
// not a terminal.
type progressLog struct {
	mu      sync.Mutex
	w       io.Writer
	fresh   func()
	waiting bool // a wait's line was written; the next polls add none
}

func (l *progressLog) event(e runner.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var line string
	switch e.Kind {
	case runner.EventResume:
		l.waiting = false
		return
	case runner.EventWait:
		if l.waiting {
			return
		}
		l.waiting = true
		line = fmt.Sprintf("idem: %s: in progress on %s (pid %d, attempt %d/%d); waiting for it (--wait)",
			e.Key, oneLine(e.Holder.Host), e.Holder.PID, e.Attempt, e.MaxAttempts)
	case runner.EventBackoff:
		line = fmt.Sprintf("idem: %s: attempt %d/%d exited %d; next try in %s",
			e.Key, e.Attempt, e.MaxAttempts, e.ExitCode, logDelay(e.Delay))
	case runner.EventTakeover:
		line = takeoverLine(e)
	default:
		return
	}
	if l.fresh != nil {
		l.fresh() // the command's last output did not end its line
	}
	io.WriteString(l.w, line+"\n")
}

// logDelay renders a backoff for a log line: a delay under a second as
// it is (10ms), longer ones as the status line does.
func logDelay(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return seconds(d)
}

// takeoverLine says that a run takes over the key of an owner that is gone.
func takeoverLine(e runner.Event) string {
	return fmt.Sprintf("idem: %s: taking over from %s (pid %d), which is gone or whose lease expired; this is attempt %d/%d",
		e.Key, oneLine(e.Holder.Host), e.Holder.PID, e.Attempt, e.MaxAttempts)
}

func (p *progress) event(e runner.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stop != nil {
		close(p.stop)
		p.stop = nil
	}
	switch e.Kind {
	case runner.EventTakeover:
		// A line that stays: the previous owner's fate is worth keeping.
		p.show("")
		if p.fresh != nil {
			p.fresh()
		}
		io.WriteString(p.w, takeoverLine(e)+"\n")
	case runner.EventResume:
		p.show("")
	case runner.EventWait:
		p.show(statusLine(e, e.Delay))
	case runner.EventBackoff:
		p.show(statusLine(e, e.Delay))
		until := p.now().Add(e.Delay)
		stop := make(chan struct{})
		p.stop = stop
		go p.countdown(e, until, stop)
	}
}

// countdown rewrites the backoff's line every second until stopped.
func (p *progress) countdown(e runner.Event, until time.Time, stop chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		if p.stop == stop {
			p.show(statusLine(e, until.Sub(p.now())))
		}
		p.mu.Unlock()
	}
}

// show replaces the status line with line ("" erases it). Called with mu held.
func (p *progress) show(line string) {
	if line == p.shown {
		return
	}
	if p.shown == "" && p.fresh != nil {
		p.fresh() // the command's last output did not end its line
	}
	if line == "" {
		io.WriteString(p.w, clearLine)
	} else {
		io.WriteString(p.w, clearLine+line)
	}
	p.shown = line
}

// statusLine is the text of the status line; left is the time until the
// next attempt or look.
func statusLine(e runner.Event, left time.Duration) string {
	switch e.Kind {
	case runner.EventBackoff:
		return fmt.Sprintf("idem: %s: attempt %d/%d exited %d; next try in %s",
			e.Key, e.Attempt, e.MaxAttempts, e.ExitCode, countdown(left))
	case runner.EventWait:
		return fmt.Sprintf("idem: %s: waiting for %s pid %d (attempt %d/%d), %s so far",
			e.Key, oneLine(e.Holder.Host), e.Holder.PID, e.Attempt, e.MaxAttempts, seconds(e.Waited))
	}
	return ""
}

// countdown renders the time left until the next attempt: under a second
// in tenths rounded up (a 200ms backoff is "200ms", not "1s"), longer ones
// in whole seconds as seconds does.
func countdown(d time.Duration) string {
	if d > 0 && d < time.Second {
		tenth := 100 * time.Millisecond
		return ((d + tenth - 1) / tenth * tenth).String()
	}
	return seconds(d)
}

// seconds renders a wait for people: whole seconds, rounded up (a 300ms
// backoff is "1s", never "0s"), minutes past 99s.
func seconds(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	s := int64(math.Ceil(d.Seconds()))
	if s < 100 {
		return fmt.Sprintf("%ds", s)
	}
	return fmt.Sprintf("%dm%02ds", s/60, s%60)
}
