package cmd

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/monitor"
	"github.com/idemhq/idem/internal/runner"
)

// pingSource is where the run's ping URL comes from, as messages name it.
func (o *runOptions) pingSource() string {
	if o.pingSet {
		return "--ping"
	}
	return "IDEM_PING_URL"
}

// pingTemplate is the run's ping URL (--ping, else IDEM_PING_URL),
// checked; ok is false when there is none, and pings are off.
func (o *runOptions) pingTemplate(a *app) (t monitor.Template, ok bool, err error) {
	raw := o.ping
	if !o.pingSet {
		raw = a.getenv("IDEM_PING_URL")
		if raw == "" {
			return monitor.Template{}, false, nil
		}
	} else if raw == "" {
		// Most likely --ping "$UNSET": monitoring that is silently off.
		return monitor.Template{}, false, usagef("give the ping URL, or leave --ping out (IDEM_PING_URL= turns pings off)", "--ping is empty")
	}
	t, err = monitor.ParseTemplate(raw)
	if err != nil {
		// The URL is a secret: the error shows its host at most.
		return monitor.Template{}, false, usagef("give the check's ping URL, such as https://hc-ping.com/UUID or https://hc-ping.com/PING_KEY/{group}",
			"%s %s: %v", o.pingSource(), monitor.Redact(raw), err)
	}
	return t, true, nil
}

// pingElsewhere hands the run to the companion executable that links
// the pinger (idem-net), as a PostgreSQL ledger is: this one links no
// HTTP client, so that a run without pings does not pay for one.
func (a *app) pingElsewhere() error {
	c, ok := a.backends.Companion()
	if !ok {
		return &exitError{code: exitcode.Software, msg: "this idem executable can send no pings and knows no idem-net to hand them to"}
	}
	c.Kind = "a run with monitor pings (--ping, IDEM_PING_URL)"
	return a.handOff(c)
}

// pinger tells a monitor of one invocation's attempts, in healthchecks.io's
// ping protocol (internal/monitor): what each outcome sends is in
// runDetails. It is told by the runner's callbacks (attempted, event) and,
// once the runner returned, by finish; close waits for delivery.
type pinger struct {
	dial     monitor.Dialer
	target   *url.URL
	shown    string // the URL without its secret
	agent    string
	sender   monitor.Sender // nil until the first ping
	ledger   ledger.Ledger
	ledgerID string
	key      string
	noOutput bool
	// open is the run id of the attempt whose start went out and whose
	// end did not ("": none).
	open string
}

// newPinger is the pinger of a run of key on l, or nil without a ping URL.
func (a *app) newPinger(t monitor.Template, key string, l ledger.Ledger, noOutput bool) (*pinger, error) {
	target, err := t.Expand(key)
	if err != nil {
		return nil, usagef("check the ping URL's placeholders", "%s %s: %v", "ping URL", t.Redacted(), err)
	}
	return &pinger{dial: a.dial, target: target, shown: t.Redacted(), agent: "idem/" + strings.Fields(versionString())[0],
		ledger: l, ledgerID: ledger.Identity(l), key: key, noOutput: noOutput}, nil
}

func (p *pinger) send(m monitor.Ping) {
	if p.sender == nil {
		p.sender = p.dial(p.target, p.agent)
	}
	p.sender.Send(m)
}

// attempted is runner.Options.Attempted: an attempt's start is /start; its
// end is its exit status when it is the key's outcome, and a log entry
// when the key is left to be tried again (by this invocation after a
// backoff, or by a later one), which must not page anyone.
func (p *pinger) attempted(r runner.AttemptReport) {
	rid := monitor.RunID(p.ledgerID, r.Key, r.Token, r.Attempt)
	if !r.Ended {
		p.open = rid
		p.send(monitor.Ping{Kind: monitor.Start, RunID: rid})
		return
	}
	p.open = ""
	stdout, stderr := r.Stdout, r.Stderr
	if p.noOutput {
		stdout, stderr = nil, nil
	}
	m := monitor.Ping{Kind: monitor.Log, RunID: rid, Body: monitor.Body(stdout, stderr, endLine(r), monitor.BodyLimit)}
	if r.Final() {
		m.Kind, m.Code = monitor.Exit, r.ExitCode
	}
	p.send(m)
}

// endLine is idem's line on how an attempt ended, for the ping's body.
func endLine(r runner.AttemptReport) string {
	how := fmt.Sprintf("exited %d", r.ExitCode)
	switch {
	case r.Signal != 0:
		how = fmt.Sprintf("was interrupted by %s (idem was), exit %d", signalName(r.Signal), r.ExitCode)
	case r.TimedOut:
		how = fmt.Sprintf("timed out, exit %d", r.ExitCode)
	}
	var then string
	switch {
	case r.Status == ledger.StatusSucceeded:
		then = "succeeded"
	case r.Status == ledger.StatusFailed && r.Class == ledger.ClassPermanent:
		then = "failed for good (a permanent exit code)"
	case r.Status == ledger.StatusFailed:
		then = fmt.Sprintf("failed for good (the last of --max-attempts %d)", r.MaxAttempts)
	case r.Delay > 0:
		then = fmt.Sprintf("attempt %d follows in %s", r.Attempt+1, r.Delay.Round(time.Millisecond))
	default:
		then = "recorded as retryable: the next run of the key tries again"
	}
	return fmt.Sprintf("idem: %s: attempt %d/%d %s; %s", r.Key, r.Attempt, r.MaxAttempts, how, then)
}

// event is runner.Options.Progress's, for takeovers: the abandoned
// attempt's start got no end from its idem, which is gone; it gets a log
// entry (the key is tried again, by this run).
func (p *pinger) event(e runner.Event) {
	if e.Kind == runner.EventTakeover {
		p.abandoned(e.Attempt-1, e.Holder, false)
	}
}

// abandoned ends the open start of attempt n, whose idem (holder) died:
// a log entry when the key is taken over; its exit status (that of an
// abandoned attempt) when it was the last of the budget and the key is
// now failed for good, which nobody else will report.
func (p *pinger) abandoned(n int, holder ledger.Owner, final bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hist, err := p.ledger.History(ctx, p.key)
	if err != nil {
		return
	}
	var token int64
	for _, at := range hist {
		if at.N == n {
			token = at.Token // the last of that number: an earlier budget's may precede it
		}
	}
	if token == 0 {
		return
	}
	who := "its idem is gone"
	if holder.PID != 0 {
		who = fmt.Sprintf("its idem (pid %d on %s) is gone", holder.PID, holder.Host)
	}
	m := monitor.Ping{Kind: monitor.Log, RunID: monitor.RunID(p.ledgerID, p.key, token, n)}
	line := fmt.Sprintf("idem: %s: attempt %d was abandoned: %s; attempt %d takes the key over", p.key, n, who, n+1)
	if final {
		m.Kind, m.Code = monitor.Exit, ledger.AbandonedExitCode
		line = fmt.Sprintf("idem: %s: attempt %d was abandoned: %s; it was the last of the budget: failed for good, exit %d",
			p.key, n, who, ledger.AbandonedExitCode)
	}
	m.Body = monitor.Body(nil, nil, line, monitor.BodyLimit)
	p.send(m)
}

// finish sends what the runner's callbacks could not: the final end of
// an abandoned last attempt that this run found (and replays), and the
// end of an attempt whose outcome idem could not record (err), as a log
// entry with idem's error: the key runs again.
func (p *pinger) finish(res *runner.Result, err error) {
	if res != nil && res.Replayed && res.TookOver && res.Record != nil {
		p.abandoned(res.Record.Attempts, res.Record.Owner, true)
	}
	if err != nil && p.open != "" {
		_, msg, _ := explain(err)
		p.send(monitor.Ping{Kind: monitor.Log, RunID: p.open, Body: monitor.Body(nil, nil, "idem: error: "+msg, monitor.BodyLimit)})
		p.open = ""
	}
}

// close waits for the pings still under way, for at most
// monitor.ExitWait, or until idem is signalled, and says in one line
// if any was not delivered. It never changes the run's outcome.
func (p *pinger) close(u *ui, signals <-chan os.Signal) {
	if p.sender == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), monitor.ExitWait)
	defer cancel()
	go func() {
		select {
		case <-signals:
			cancel()
		case <-ctx.Done():
		}
	}()
	r := p.sender.Close(ctx)
	if r.Failed == 0 {
		return
	}
	why := "no answer"
	if r.Err != nil {
		why = r.Err.Error()
	}
	// Not subject to --quiet: a monitor that hears nothing would page
	// for a run that went well, or stay silent about one that did not.
	u.startLine()
	fmt.Fprintf(u.w, "idem: %s %d of %d pings to %s were not delivered (%s); the run's outcome is as recorded\n",
		u.hint.paint("warning:"), r.Failed, r.Sent, p.shown, oneLine(why))
}

// withPings returns the run's runner options with the pinger's callbacks.
func withPings(ro runner.Options, p *pinger) runner.Options {
	ro.Attempted = p.attempted
	shown := ro.Progress
	ro.Progress = func(e runner.Event) {
		p.event(e)
		if shown != nil {
			shown(e)
		}
	}
	return ro
}
