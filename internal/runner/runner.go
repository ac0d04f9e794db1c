// Package runner is idem's run algorithm over a ledger: reserve the key,
// run attempts of the command in its own process group, classify each exit,
// back off between transient failures while renewing the lease, and record
// the outcome. It returns values and prints nothing of its own.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/idemhq/idem/internal/backoff"
	"github.com/idemhq/idem/internal/flagval"
	"github.com/idemhq/idem/internal/ledger"
)

// Clock is the runner's time source; tests inject a fake.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// StdoutMode says how the child's stdout reaches idem's.
type StdoutMode int

// Stdout modes.
const (
	StdoutLive  StdoutMode = iota // every attempt streams as it comes
	StdoutFinal                   // only the recorded attempt's, after it ended
)

// Options is one invocation of `idem run`.
type Options struct {
	Key         string
	Argv        []string
	Fingerprint string
	MaxAttempts int
	RerunFailed bool
	Success     flagval.CodeSet
	Transient   flagval.CodeSet
	Backoff     backoff.Policy
	Lease       time.Duration
	KillGrace   time.Duration
	Timeout     time.Duration // per attempt; 0: none
	Deadline    time.Duration // whole invocation; 0: none
	TTL         time.Duration
	MaxOutput   int64
	NoOutput    bool
	StdoutMode  StdoutMode
	// Stdin is given to the child as is (--stdin pass); SpooledStdin, when
	// non-nil, is given whole to every attempt instead (--stdin spool).
	Stdin        *os.File
	SpooledStdin []byte
	Stdout       io.Writer
	Stderr       io.Writer
}

// Runner runs invocations against one ledger.
type Runner struct {
	Ledger ledger.Ledger
	Host   Host
	Clock  Clock
	Rand   backoff.Rand
	// Signals delivers SIGINT, SIGTERM and SIGHUP sent to idem; they are
	// forwarded to the child's group. Nil: none.
	Signals <-chan os.Signal
	// Environ is the environment the child inherits.
	Environ []string
}

// Result is what an invocation did.
type Result struct {
	Key      string
	Status   ledger.Status
	Replayed bool
	// Record is the replayed record (with its output) when Replayed.
	Record   *ledger.Record
	Attempts int // attempts on the record, across invocations
	Ran      int // attempts this invocation started
	ExitCode int
	Source   string // "child" or "idem"
	Started  time.Time
	Finished time.Time
	// Signal is set when idem was interrupted; idem exits 128+N.
	Signal          syscall.Signal
	TimedOut        bool
	TookOver        bool
	StdoutTruncated bool
	StderrTruncated bool
}

// BusyError is returned when a live owner holds the key.
type BusyError struct {
	Record *ledger.Record
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("key %q is in progress", e.Record.Key)
}

// LeaseLapsedError is returned when idem could not renew its lease before
// it lapsed; the child was stopped.
type LeaseLapsedError struct{ Err error }

func (e *LeaseLapsedError) Error() string { return "could not renew the lease: " + e.Err.Error() }
func (e *LeaseLapsedError) Unwrap() error { return e.Err }

// Run executes one invocation. Errors: *ledger.MismatchError, *BusyError,
// *StartError (nothing ran, nothing kept), ledger.ErrLeaseLost (the child
// was stopped, nothing written), *LeaseLapsedError, *ledger.StoreError.
func (r *Runner) Run(ctx context.Context, o Options) (*Result, error) {
	started := r.Clock.Now()
	testOnlyCrash("before-reserve")
	resv, err := r.Ledger.Reserve(ctx, ledger.ReserveRequest{
		Key: o.Key, Fingerprint: o.Fingerprint, Command: o.Argv, MaxAttempts: o.MaxAttempts,
		RerunFailed: o.RerunFailed, Owner: r.Host.Self(), Lease: o.Lease, OwnerDead: r.Host.OwnerDead,
	})
	if err != nil {
		return nil, err
	}
	testOnlyCrash("after-reserve")
	if resv.Abandoned != nil {
		r.stopGroup(ctx, *resv.Abandoned, o.KillGrace)
	}
	switch resv.Outcome {
	case ledger.Replay:
		rec := resv.Record
		return &Result{Key: o.Key, Status: rec.Status, Replayed: true, Record: rec, Attempts: rec.Attempts,
			ExitCode: rec.ExitCode, Source: rec.ExitSource, Started: started, Finished: r.Clock.Now(),
			TookOver: resv.Abandoned != nil, StdoutTruncated: rec.StdoutTruncated, StderrTruncated: rec.StderrTruncated}, nil
	case ledger.Busy:
		return nil, &BusyError{Record: resv.Record}
	}
	inv := &invocation{r: r, o: o, started: started, token: resv.Token, n: resv.Attempt, attemptID: resv.AttemptID,
		res: &Result{Key: o.Key, Started: started, Source: "child", TookOver: resv.Abandoned != nil}}
	if o.Deadline > 0 {
		inv.deadline = started.Add(o.Deadline)
	}
	return inv.run(ctx, resv.Prev)
}

// invocation is the state of one Run that owns its key.
type invocation struct {
	r         *Runner
	o         Options
	started   time.Time
	deadline  time.Time
	token     int64
	n         int
	attemptID int64
	res       *Result
	// leaseUntil is when our lease lapses unless renewed.
	leaseUntil time.Time
	retryAfter string // IDEM_RETRY_AFTER file
}

// attemptEnd is how one attempt ended.
type attemptEnd struct {
	code     int
	class    string
	signal   syscall.Signal // idem was interrupted
	timedOut bool
	stdout   *capture
	stderr   *capture
	held     *spool // --stdout final
}

func (inv *invocation) run(ctx context.Context, prev *ledger.Snapshot) (*Result, error) {
	r, o := inv.r, inv.o
	inv.leaseUntil = r.Clock.Now().Add(o.Lease)
	if f, err := os.CreateTemp("", "idem-retry-after-*"); err == nil {
		f.Close()
		inv.retryAfter = f.Name()
		defer os.Remove(inv.retryAfter)
	}
	first := true
	for {
		end, err := inv.attempt(ctx)
		var se *StartError
		if errors.As(err, &se) {
			if first {
				err = r.Ledger.Release(context.WithoutCancel(ctx), o.Key, inv.token, inv.attemptID, prev)
			} else {
				// An earlier attempt of this invocation ran: keep it,
				// retryable; the one that never started does not count.
				now := r.Clock.Now()
				kept := &ledger.Snapshot{Status: ledger.StatusRetryable, Attempts: inv.n - 1, MaxAttempts: o.MaxAttempts,
					ExitCode: inv.res.ExitCode, HasExit: true, Finished: now}
				if o.TTL > 0 {
					kept.Expires = now.Add(o.TTL)
				}
				err = r.Ledger.Release(context.WithoutCancel(ctx), o.Key, inv.token, inv.attemptID, kept)
			}
			if err != nil {
				return nil, err
			}
			return nil, se
		}
		if err != nil {
			return nil, err
		}
		first = false
		testOnlyCrash("after-child-exit")
		inv.res.Ran++
		inv.res.ExitCode = end.code
		budgetLeft := inv.n < o.MaxAttempts
		switch {
		case end.class == ledger.ClassSuccess:
			return inv.done(ctx, ledger.StatusSucceeded, end)
		case end.class == ledger.ClassPermanent, !budgetLeft:
			return inv.done(ctx, ledger.StatusFailed, end)
		case end.signal != 0 || end.timedOut && inv.pastDeadline():
			return inv.done(ctx, ledger.StatusRetryable, end)
		}
		delay := inv.nextDelay()
		if !inv.deadline.IsZero() && r.Clock.Now().Add(delay).After(inv.deadline) {
			return inv.done(ctx, ledger.StatusRetryable, end)
		}
		if err := r.Ledger.EndAttempt(ctx, o.Key, inv.token, inv.attemptID, end.code, end.class, delay); err != nil {
			return nil, err
		}
		testOnlyCrash("after-end-attempt")
		if end.held != nil {
			end.held.emit(o.Stderr) // a failed attempt's stdout goes to stderr
		}
		if sig, err := inv.sleep(ctx, delay); err != nil {
			return nil, err
		} else if sig != 0 {
			inv.res.Signal = sig
			return inv.done(ctx, ledger.StatusRetryable, &attemptEnd{code: end.code, class: end.class, stdout: end.stdout, stderr: end.stderr})
		}
		n, id, err := r.Ledger.StartAttempt(ctx, o.Key, inv.token, o.Lease)
		if err != nil {
			return nil, err
		}
		inv.n, inv.attemptID = n, id
		inv.leaseUntil = r.Clock.Now().Add(o.Lease)
	}
}

func (inv *invocation) pastDeadline() bool {
	return !inv.deadline.IsZero() && !inv.r.Clock.Now().Before(inv.deadline)
}

// nextDelay is the backoff after attempt n, or what the child asked for in
// IDEM_RETRY_AFTER, capped by --max-delay.
func (inv *invocation) nextDelay() time.Duration {
	d := inv.o.Backoff.Delay(inv.n, inv.r.Rand)
	if inv.retryAfter == "" {
		return d
	}
	b, err := os.ReadFile(inv.retryAfter)
	if err != nil || len(b) == 0 {
		return d
	}
	os.Truncate(inv.retryAfter, 0)
	asked, err := parseRetryAfter(string(b))
	if err != nil {
		return d
	}
	return min(asked, inv.o.Backoff.Max)
}

// parseRetryAfter accepts a Go duration ("30s", "1m") or plain seconds.
func parseRetryAfter(s string) (time.Duration, error) {
	s = trimSpace(s)
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	d, err := flagval.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	return d, nil
}

func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\n' || s[0] == '\t' || s[0] == '\r') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\n' || s[len(s)-1] == '\t' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}

// done records the outcome and completes the result.
func (inv *invocation) done(ctx context.Context, status ledger.Status, end *attemptEnd) (*Result, error) {
	if end.signal != 0 {
		inv.res.Signal = end.signal
	}
	if status == ledger.StatusRetryable && inv.n >= inv.o.MaxAttempts {
		status = ledger.StatusFailed // the budget wins
	}
	inv.res.TimedOut = end.timedOut
	if err := inv.finish(ctx, status, end.code, end.class, end); err != nil {
		if end.held != nil {
			end.held.discard()
		}
		return nil, err
	}
	testOnlyCrash("after-finish")
	if end.held != nil {
		end.held.emit(inv.o.Stdout)
	}
	inv.res.Status = status
	inv.res.Attempts = inv.n
	inv.res.Finished = inv.r.Clock.Now()
	return inv.res, nil
}

func (inv *invocation) finish(ctx context.Context, status ledger.Status, code int, class string, end *attemptEnd) error {
	req := ledger.FinishRequest{
		Key: inv.o.Key, Token: inv.token, AttemptID: inv.attemptID, Status: status, ExitCode: code,
		ExitSource: "child", Class: class, Duration: inv.r.Clock.Now().Sub(inv.started), TTL: inv.o.TTL,
		OutputStored: !inv.o.NoOutput,
	}
	if end != nil && end.stdout != nil {
		req.Stdout, req.StdoutTruncated = end.stdout.buf, end.stdout.truncated
		req.Stderr, req.StderrTruncated = end.stderr.buf, end.stderr.truncated
		inv.res.StdoutTruncated, inv.res.StderrTruncated = req.StdoutTruncated, req.StderrTruncated
	}
	if end != nil && end.timedOut {
		req.ExitSource = "idem"
	}
	// The outcome must be written even when idem is being stopped.
	testOnlyCrash("before-finish")
	return inv.r.Ledger.Finish(context.WithoutCancel(ctx), req)
}

// environ is the child's environment for the current attempt.
func (inv *invocation) environ() []string {
	env := make([]string, 0, len(inv.r.Environ)+4)
	for _, kv := range inv.r.Environ {
		switch envName(kv) {
		case "IDEM_KEY", "IDEM_ATTEMPT", "IDEM_MAX_ATTEMPTS", "IDEM_RETRY_AFTER":
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "IDEM_KEY="+inv.o.Key, "IDEM_ATTEMPT="+strconv.Itoa(inv.n),
		"IDEM_MAX_ATTEMPTS="+strconv.Itoa(inv.o.MaxAttempts))
	if inv.retryAfter != "" {
		env = append(env, "IDEM_RETRY_AFTER="+inv.retryAfter)
	}
	return env
}

func envName(kv string) string {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i]
		}
	}
	return kv
}
