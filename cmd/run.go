package cmd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/backoff"
	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/fingerprint"
	"github.com/idemhq/idem/internal/flagval"
	"github.com/idemhq/idem/internal/key"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/monitor"
	"github.com/idemhq/idem/internal/probe"
	"github.com/idemhq/idem/internal/runner"
	"github.com/idemhq/idem/internal/runner/procs"
)

// maxPayload bounds --payload-file: it is read whole to canonicalise JSON.
const maxPayload = 64 << 20

// runOptions is what `idem run` was asked to do: its flags bind straight
// into the runner's options; the others say how to build the fingerprint,
// stdin and stdout, and what to print.
type runOptions struct {
	runner.Options
	stdoutMode     string // live or final: Options.StdoutMode
	stderrMode     string // live or final: Options.StderrFinal
	stdinMode      string
	payload        string
	payloadSet     bool
	graceSet       bool // --kill-grace given: else it shrinks with a short --lease
	leaseSet       bool // --lease given: else the ledger's kind chooses
	codesSet       bool // both --success-codes and --transient-codes given
	payloadFile    string
	fingerprintEnv []string
	quiet          bool
	report         string // --report FILE
	period         periodFlags
	ping           string // --ping URL
	pingSet        bool
}

func newRunCmd(a *app) *cobra.Command {
	o := &runOptions{}
	c := &cobra.Command{
		Use:   "run --key KEY [flags] -- COMMAND [ARG...]",
		Short: "Run a command once per key; replay its result for every repeat",
		Long: `Run COMMAND unless KEY already has a result, and record what it did.

A repeat of a key that succeeded, or failed for good, does not run again: it
replays the recorded stdout and stderr and exits with the recorded code.
A transient failure (--transient-codes) is retried with capped exponential
backoff, up to --max-attempts for the key across all invocations.

A key is ` + key.Rule + `,
with no empty ':'-separated part (what an unset variable leaves) and at
least one letter or digit; build one from arbitrary parts with 'idem key'.`,
		Example: `  # crontab: once per day, whatever cron does (a second firing waits for the
  # first, then replays it); cron's PATH is /usr/bin:/bin, and an unescaped %
  # ends cron's command: write \%
  PATH=/usr/local/bin:/usr/bin:/bin
  17 3 * * * idem run --key backup:$(date +\%F) --wait --deadline 2h -- /usr/local/bin/backup

  # once a day without date(1) and cron's \% (the key is backup:2026-12-03),
  # with healthchecks.io pings; IDEM_PING_URL is set in the crontab
  idem run --key backup --period day -- /usr/local/bin/backup

  # CI: a deploy step keyed by commit; a re-run of the pipeline replays it
  idem run --key deploy:prod:$CI_COMMIT_SHA --max-attempts 5 -- ./deploy.sh

  # a webhook handler: the payload, on stdin, is part of the fingerprint
  idem run --key "$(idem key evt "$EVENT_ID")" --stdin spool --wait -- ./handle.sh < "$PAYLOAD_FILE"

  # capture the same bytes on the first run and on every replay
  out=$(idem run --key report:2026-12 --stdout final -- ./report.sh)`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			o.Argv = args
			o.payloadSet = c.Flags().Changed("payload")
			o.graceSet = c.Flags().Changed("kill-grace")
			o.leaseSet = c.Flags().Changed("lease")
			o.codesSet = c.Flags().Changed("success-codes") && c.Flags().Changed("transient-codes")
			o.pingSet = c.Flags().Changed("ping")
			if err := checkReport(o.report); err != nil {
				return err
			}
			started := a.now()
			res, code, err := runRun(c.Context(), a, o)
			if o.report != "" {
				r := buildReport(o.Key, res, code, err, started, a.now())
				r.Ledger, r.Command = a.ledgerDescription(), o.Argv
				writeReport(a, o.report, r)
			}
			if err != nil {
				return err
			}
			return status(code)
		},
	}
	f := c.Flags()
	f.SetInterspersed(false)
	f.SortFlags = false
	def := backoff.Default()
	// A command that exits EX_TEMPFAIL asks to be tried again.
	o.Success, o.Transient = runner.DefaultSuccessCodes(), runner.DefaultTransientCodes()
	f.StringVarP(&o.Key, "key", "k", "", "idempotency key (required): "+key.Rule)
	f.IntVar(&o.MaxAttempts, "max-attempts", 3, "the key's whole budget of attempts, across invocations")
	f.BoolVar(&o.RerunFailed, "rerun-failed", false, "run a key that failed for good again, with a fresh budget")
	f.Var(flagval.NewCodes(&o.Success, o.Success), "success-codes", "exit codes that mean success, in place of the default 0: list 0 too to keep it (list and ranges: 0,3-5)")
	f.Var(flagval.NewCodes(&o.Transient, o.Transient), "transient-codes", "exit codes worth retrying (none of --success-codes, when both are given); every other failure is permanent")
	f.Var(flagval.NewDuration(&o.Backoff.Initial, def.Initial), "initial-delay", "backoff before the second attempt")
	f.Float64Var(&o.Backoff.Multiplier, "multiplier", def.Multiplier, "backoff growth per attempt")
	f.Var(flagval.NewDuration(&o.Backoff.Max, def.Max), "max-delay", "longest backoff (also caps IDEM_RETRY_AFTER)")
	f.Float64Var(&o.Backoff.Jitter, "jitter", def.Jitter, "random share taken off each delay, 0 to 1 (0: deterministic)")
	f.Var(flagval.NewDuration(&o.Timeout, 0), "timeout", "stop an attempt after this long (SIGTERM, then SIGKILL): exit 124, retried as transient; at least 1ms; 0: none")
	f.Var(flagval.NewDuration(&o.KillGrace, runner.DefaultKillGrace), "kill-grace", "time between SIGTERM and SIGKILL when stopping the command (under half the --lease; a short --lease shortens the default to a quarter of it)")
	f.Var(flagval.NewDuration(&o.Deadline, 0), "deadline", "bound the whole invocation, attempts and backoff; 0: none")
	f.Var(flagval.NewDuration(&o.Lease, runner.LocalLease), "lease", "lease on the key, renewed while idem lives (default "+
		runner.LocalLease.String()+" for a ledger file, "+runner.SharedLease.String()+" for PostgreSQL)")
	f.Lookup("lease").DefValue = "0" // the ledger's kind chooses: no "(default 30s)"
	f.BoolVar(&o.Wait, "wait", false, "if the key is in progress elsewhere, wait for that run and replay its result (bound the wait with --wait-timeout or --deadline)")
	f.Var(flagval.NewDuration(&o.WaitTimeout, 0), "wait-timeout", "give up waiting after this long, exit 75 (implies --wait); 0: no limit")
	f.Var(flagval.NewDuration(&o.TTL, 0), "ttl", "forget the result this long after it was recorded (accepts d), at least 1ms; 0: keep")
	f.StringVar(&o.payload, "payload", "", "request payload that is part of the fingerprint (JSON is canonicalised)")
	f.StringVar(&o.payloadFile, "payload-file", "", "read the payload from FILE")
	f.StringArrayVar(&o.fingerprintEnv, "fingerprint-env", nil, "include environment variable NAME in the fingerprint (repeatable; only a hash is stored)")
	f.StringVar(&o.stdinMode, "stdin", "pass", "pass: the child reads idem's stdin; spool: every attempt gets the same bytes")
	f.StringVar(&o.stdoutMode, "stdout", "live", "live: stream every attempt; final: only the recorded attempt's stdout")
	f.StringVar(&o.stderrMode, "stderr", "live", "live: stream every attempt; final: only the recorded attempt's stderr (a failed attempt's stays in idem inspect)")
	f.Var(flagval.NewSize(&o.MaxOutput, 16<<20), "max-output", "bytes of stdout and of stderr kept in the ledger")
	f.BoolVar(&o.NoOutput, "no-output", false, "store no output (for commands that print secrets)")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no idem: notices (errors still print)")
	f.StringVar(&o.report, "report", "", "write a JSON summary of this invocation to FILE, also on replay and failure (see docs/operators.md)")
	unitHelp, tzHelp := periodHelp()
	f.StringVar(&o.period.unit, "period", "", unitHelp)
	f.StringVar(&o.period.tz, "tz", "", tzHelp)
	f.StringVar(&o.ping, "ping", "", "send healthchecks.io pings to URL ({key} and {group} replaced): /start, then the exit status of the key's outcome, or /log for an attempt left to be retried; none for a replay (default $IDEM_PING_URL, which ps does not show)")
	helpSection(a, c, func() string { return detailsHelp(runDetails()) + runExitStatusHelp() })
	return c
}

// runDetails is how a run works underneath: what the child gets, the lease
// and signals. The help shows it after Usage and Examples, which most
// readers come for; the manual page keeps it in run's section.
func runDetails() string {
	return `The child inherits the environment plus IDEM_LEDGER (the ledger this run
records in, however it was named; a DSN without its password: a nested
idem takes it from PGPASSWORD or a PGPASSFILE), IDEM_KEY,
IDEM_TOKEN (the fencing token: refuse writes downstream whose token is
lower than one already seen), IDEM_ATTEMPT (1-based), IDEM_MAX_ATTEMPTS,
IDEM_RETRY_AFTER (a file's path: write a duration such as 30s there to ask for
that delay before the next attempt) and IDEM_RUN (the run's identity, by
which a later run finds and stops this run's processes), and fd 3, the
key's run lock: a run of the key on this host does not start while a
process keeps it open.

Lease: while the command runs, idem renews its lease on the key; when the
ledger cannot be reached in time, idem stops the command (SIGTERM, SIGKILL
after --kill-grace) so that it is dead before the lease expires and another
run may take the key. With the defaults, idem rides out a ledger outage of
` + leaseTolerance() + `
without stopping the command, however the outage falls (the worst one begins
just before a renewal). Once it stopped the command, idem renews no more and
gives the key back as retryable if the ledger answers again in time. Another
host takes over a dead host's key only once its lease has expired. A lease
that lapsed while idem itself was paused (SIGSTOP, a suspended host) exits 75;
one that could not be renewed for the ledger's failure, 74.

Signals: SIGINT, SIGTERM and SIGHUP are forwarded to the command, again for
every repeat, never escalated: SIGKILL comes only after --kill-grace. A
SIGHUP or SIGINT ignored by idem's parent (nohup, a script's background
job) stays ignored; SIGTERM is forwarded even then.

` + pingDetails()
}

// pingDetails is the Pings paragraph of runDetails, with the bounds of
// internal/monitor.
func pingDetails() string {
	return wrap(fmt.Sprintf(`Pings (--ping URL, or IDEM_PING_URL, in healthchecks.io's API): URL/start
when an attempt's command starts; URL/CODE, its exit status, when its end
is the key's outcome (succeeded, or failed for good); URL/log when the key
is left to be tried again, which alerts nobody. Each has ?rid=, a UUID
that pairs an attempt's start and end; an end's body is the end of the
attempt's output (none with --no-output) and idem's line, at most %d
bytes. A replay, a busy key and a wait send nothing. A takeover ends the
dead run's open start with a log entry, or, when that was the budget's
last attempt, with its final 75. {key} and {group} (the key without its
last part) in the URL are replaced. Pings never delay the command nor
change the outcome or exit code: each request has %s, each ping %s with
its tries, and idem's exit waits at most %s for them, then says in one
line what was not delivered. The URL is never printed in full, recorded,
nor passed to the command. Pings are sent by idem-net, beside idem, to
which idem hands such a run.`, monitor.BodyLimit, secs(monitor.TryTimeout), secs(monitor.Budget), secs(monitor.ExitWait)), 75)
}

// secs writes d in seconds, for help text.
func secs(d time.Duration) string { return fmt.Sprintf("%gs", d.Seconds()) }

// leaseTolerance says which ledger outage a run with the default lease and
// kill grace rides out, for each kind of ledger.
func leaseTolerance() string {
	shared, local := runner.SharedLease, runner.LocalLease
	secs := func(d time.Duration) int { return int(d.Seconds()) }
	return fmt.Sprintf("up to %ds on PostgreSQL (--lease %ds) and %ds on a ledger file (--lease %ds)",
		secs(runner.Tolerance(shared, runner.DefaultGrace(shared))), secs(shared),
		secs(runner.Tolerance(local, runner.DefaultGrace(local))), secs(local))
}

// sharedLedger reports whether the ledger is shared by hosts (a
// PostgreSQL database) rather than a file on this host.
func (a *app) sharedLedger() bool {
	loc, err := a.ledgerPath()
	return err == nil && loc.Shared()
}

// check validates flag values that their types cannot, and settles the
// lease and kill grace: their defaults depend on whether the ledger is
// shared (a PostgreSQL server) or a file on this host.
func (o *runOptions) check(shared bool) error {
	hint := "see 'idem run --help'"
	switch {
	case o.Key == "":
		return usagef("idem run --key KEY -- COMMAND [ARG...]", "missing --key")
	case len(o.Argv) == 0:
		return usagef("idem run --key KEY -- COMMAND [ARG...]", "no command to run")
	case o.MaxAttempts < 1 || o.MaxAttempts > 1_000_000:
		return usagef(hint, "--max-attempts must be 1-1000000 (got %d)", o.MaxAttempts)
	case o.MaxOutput < 0:
		return usagef(hint, "--max-output must not be negative")
	case o.stdoutMode != "live" && o.stdoutMode != "final":
		return usagef(hint, "--stdout must be live or final (got %q)", o.stdoutMode)
	case o.stderrMode != "live" && o.stderrMode != "final":
		return usagef(hint, "--stderr must be live or final (got %q)", o.stderrMode)
	case o.stdinMode != "pass" && o.stdinMode != "spool":
		return usagef(hint, "--stdin must be pass or spool (got %q)", o.stdinMode)
	case o.payloadSet && o.payloadFile != "":
		return usagef(hint, "use --payload or --payload-file, not both")
	case o.payloadFile == "-":
		return usagef("save the payload to a file and pass its path", "--payload-file - is not supported: stdin belongs to the command")
	case o.Timeout < 0 || o.Timeout > 0 && o.Timeout < minDuration:
		return usagef(hint, "--timeout must be 0 (none) or at least %s (got %s)", minDuration, o.Timeout)
	case o.TTL < 0 || o.TTL > 0 && o.TTL < minDuration:
		return usagef(hint, "--ttl must be 0 (keep) or at least %s (got %s)", minDuration, o.TTL)
	}
	if code, ok := overlap(o.Success, o.Transient); ok && o.codesSet {
		return usagef(hint, "--success-codes and --transient-codes both name %d: an exit code means success or a transient failure, not both", code)
	}
	if !o.leaseSet {
		o.Lease = runner.LocalLease
		if shared {
			o.Lease = runner.SharedLease
		}
	}
	if !o.graceSet {
		o.KillGrace = runner.DefaultGrace(o.Lease)
	}
	if err := runner.CheckLease(o.Lease, o.KillGrace); err != nil {
		h := "give a --kill-grace under half the --lease, or a longer --lease"
		if o.Lease < time.Second {
			h = hint
		}
		return usagef(h, "%v", err)
	}
	if err := key.Validate(o.Key); err != nil {
		return usagef("build a valid key with: idem key PART...", "%v", err)
	}
	if err := o.Backoff.Validate(); err != nil {
		return usagef(hint, "%v", err)
	}
	for _, name := range o.fingerprintEnv {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return usagef(hint, "invalid --fingerprint-env name %q", name)
		}
	}
	return nil
}

// minDuration is the shortest --timeout and --ttl: below it the value is
// a typo (1ns for 1s), not a time any command or record could honour.
const minDuration = time.Millisecond

// overlap returns the lowest exit code both a and b contain.
func overlap(a, b flagval.CodeSet) (int, bool) {
	for code := 0; code <= 255; code++ {
		if a.Contains(code) && b.Contains(code) {
			return code, true
		}
	}
	return 0, false
}

// runRun runs one invocation and returns the runner's result and the code
// idem exits with, or the error that stopped it.
func runRun(ctx context.Context, a *app, o *runOptions) (*runner.Result, int, error) {
	shared := a.sharedLedger() // hands a PostgreSQL ledger to idem-net
	tpl, pinging, err := o.pingTemplate(a)
	if err != nil {
		return nil, 0, err
	}
	if pinging && a.dial == nil {
		// Before anything is read, written or caught, as for a ledger.
		return nil, 0, a.pingElsewhere()
	}
	if pinging && o.pingSet {
		// Said where the pings are sent (idem-net), once.
		a.ui.warnf("the ping URL on --ping is visible to every user of this host (ps) while idem runs, and anyone with it can ping the check: put it in IDEM_PING_URL")
	}
	if on, err := o.period.set(); err != nil {
		return nil, 0, err
	} else if on && o.Key != "" { // else check says --key is missing
		label, err := o.period.label(a)
		if err != nil {
			return nil, 0, err
		}
		o.Key += ":" + label
	}
	if o.Key != "" {
		// Before the key's other rules: "deploy:$UNSET" is too short as
		// well, and the unset variable is what to say.
		if err := key.CheckParts(o.Key); err != nil {
			return nil, 0, usagef(emptyPartHint(a.environ), "%v", err)
		}
	}
	if err := o.check(shared); err != nil {
		return nil, 0, err
	}
	if outer, ok := lookupEnv(a.environ, "IDEM_KEY"); ok && outer == o.Key {
		// A run of this key is this process's ancestor: it would wait for
		// itself (--wait) or find the key busy and burn its budget.
		return nil, 0, &exitError{code: exitcode.Usage,
			msg:  fmt.Sprintf("idem run --key %s inside a run of the same key (IDEM_KEY is %s): it would wait for itself; nothing ran", o.Key, outer),
			hint: "give the inner step a key of its own, e.g. --key \"$IDEM_KEY:step\""}
	}
	u := a.ui
	u.quiet = o.quiet
	stderr := &lineWriter{w: a.stderr}
	u.w = stderr
	fp, spooled, err := o.fingerprint(a, u)
	if err != nil {
		return nil, 0, err
	}
	probe.At("parsed")
	// The signal handlers go in while the ledger opens: each costs a
	// round trip to the runtime's signal thread, which then overlaps the
	// open's own work. Nothing is reserved, and nothing written to stderr,
	// before they are in: a signal that comes first ends idem by its
	// default action before anything is reserved, and the open's warnings
	// and error wait, so that a stderr nobody reads (SIGPIPE) cannot end
	// it. The child's start is prepared there too.
	sigc := make(chan chan os.Signal, 1)
	go func() {
		sigc <- notifySignals()
		runner.PrepareStart()
	}()
	var held bytes.Buffer
	u.w = &held
	l, loc, err := a.openRunLedger(ctx, o.Deadline)
	sigs := <-sigc
	u.w = stderr
	if held.Len() > 0 {
		stderr.Write(held.Bytes())
	}
	if err != nil {
		return nil, 0, err
	}
	probe.At("opened")
	defer ledger.CloseAtExit(l)

	r := &runner.Runner{
		Ledger: l, LookupHost: a.hostLookup(), Clock: runner.SystemClock{},
		Rand: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), Signals: sigs, Environ: a.childEnviron(a.environ, loc.Location),
		LockPath: a.runLockPath(loc, l), TrustedUIDs: ledgerOwner(l),
	}
	r.Procs = procs.New(r.TrustedUIDs...)
	ro := o.Options
	ro.Fingerprint = fp
	ro.Wait = o.Wait || o.WaitTimeout > 0
	ro.StderrFinal = o.stderrMode == "final"
	if o.stdoutMode == "final" {
		ro.StdoutMode = runner.StdoutFinal
	}
	ro.Stdin, ro.SpooledStdin, ro.Stdout, ro.Stderr = a.stdin, spooled, a.stdout, stderr
	ro.Progress = newProgress(a.stderr, a.watched(a.stderr), o.quiet, stderr.startLine)
	var pings *pinger
	if pinging {
		if pings, err = a.newPinger(tpl, o.Key, l, o.NoOutput); err != nil {
			return nil, 0, err
		}
		ro = withPings(ro, pings)
	}
	res, err := r.Run(ctx, ro)
	if err != nil {
		err = runError(err, ro, ledger.NowOf(l, a.now))
	}
	if pings != nil {
		pings.finish(res, err)
		defer pings.close(u, sigs)
	}
	if err != nil {
		return nil, 0, err
	}
	for _, w := range res.Warnings {
		u.warnf("%s", w)
	}
	render(a, u, res, ledger.NowOf(l, a.now))
	reportCI(a, u, res, res.Exit())
	return res, res.Exit(), nil
}

// fingerprint is the run's fingerprint: the command, the payload, the
// --fingerprint-env values and, with --stdin spool, the hash of stdin,
// which it reads whole and returns.
func (o *runOptions) fingerprint(a *app, u *ui) (fp string, spooled []byte, err error) {
	in := fingerprint.Input{Argv: o.Argv}
	switch {
	case o.payloadSet:
		in.Payload, in.HasPayload = []byte(o.payload), true
	case o.payloadFile != "":
		b, err := readPayload(o.payloadFile)
		if err != nil {
			return "", nil, err
		}
		in.Payload, in.HasPayload = b, true
	}
	for _, name := range o.fingerprintEnv {
		v, ok := lookupEnv(a.environ, name)
		in.Env = append(in.Env, fingerprint.EnvVar{Name: name, Value: v, Set: ok})
	}
	if o.stdinMode == "spool" {
		if a.stdin != nil && isTerminal(a.stdin) {
			// Otherwise idem seems to hang, waiting for the end of input.
			u.noticef("--stdin spool reads all of stdin before the command starts: type it, then Ctrl-D")
		}
		b, err := readLimited(a.stdin, o.MaxOutput)
		if err != nil {
			return "", nil, err
		}
		sum := sha256.Sum256(b)
		spooled, in.Stdin = b, sum[:]
	}
	fp, err = fingerprint.Sum(in)
	if err != nil {
		var dup *fingerprint.DuplicateKeyError
		if errors.As(err, &dup) {
			return "", nil, &exitError{code: exitcode.Usage, msg: "payload: " + err.Error(), hint: "remove the duplicate key from the JSON payload"}
		}
		return "", nil, usagef("see 'idem run --help'", "%v", err)
	}
	return fp, spooled, nil
}

// notifySignals catches the signals idem forwards to the command.
func notifySignals() chan os.Signal {
	// There is no signal.Stop: idem exits next, and Stop, like Notify,
	// waits for a round trip to the runtime's signal thread per signal.
	// SIGHUP or SIGINT that idem's parent set to ignore (nohup, a
	// shell's background job) stays ignored, for idem and for the
	// command: the runtime keeps those two ignored. It installs its own
	// handler for an ignored SIGTERM, so signal.Ignored cannot tell, and
	// idem catches it.
	sigs := make(chan os.Signal, 4)
	for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		if !signal.Ignored(s) {
			signal.Notify(sigs, s)
		}
	}
	// Catching SIGPIPE keeps a closed stdout (idem run ... | head) from
	// killing idem; the handler is reset to default in the child by exec.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	return sigs
}

// openRunLedger opens the ledger within --deadline (connecting to a
// server is retried while its failures may pass): a deadline that passes
// first is the deadline's error, exit 75.
func (a *app) openRunLedger(ctx context.Context, deadline time.Duration) (ledger.Ledger, ledgerLocation, error) {
	if deadline <= 0 {
		return a.openLedger(ctx)
	}
	dctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	l, loc, err := a.openLedger(dctx)
	if err != nil && dctx.Err() != nil && ctx.Err() == nil {
		return nil, loc, &exitError{code: exitcode.TempFail, reason: "deadline",
			msg:  fmt.Sprintf("--deadline %s passed while connecting to the ledger; nothing ran: %v", deadline, err),
			hint: "check that the ledger is reachable, or allow a longer --deadline"}
	}
	return l, loc, err
}

// render prints what a finished invocation owes the user: a replay's
// output, and a notice when the exit code needs one. now is on the
// ledger's clock, which stamped the records.
func render(a *app, u *ui, res *runner.Result, now time.Time) {
	if res.Replayed {
		rec := res.Record
		a.stdout.Write(rec.Stdout)
		u.w.Write(rec.Stderr)
		when := rec.Finished
		u.noticef("replayed %s: %s %s (%s ago), exit %d%s", rec.Key, rec.Status, when.UTC().Format(time.RFC3339),
			age(now.Sub(when)), rec.ExitCode, outputNote(rec))
		if rec.StdoutTruncated || rec.StderrTruncated {
			u.warnf("the recorded output of %s was truncated at --max-output; this replay is incomplete", rec.Key)
		}
		if rec.Status == ledger.StatusFailed {
			u.hintf("run it again with --rerun-failed, or reset it with idem purge %s", rec.Key)
		}
		return
	}
	if res.StdoutTruncated || res.StderrTruncated {
		u.warnf("output past --max-output was not stored; replays of %s will be truncated", res.Key)
	}
	code := res.ExitCode
	switch {
	case res.Signal != 0:
		u.noticef("%s: interrupted by %s; recorded as %s after attempt %d", res.Key, signalName(res.Signal), res.Status, res.Attempts)
	case res.Status == ledger.StatusFailed && res.TimedOut:
		u.noticef("%s: attempt %d timed out, exit %d; recorded as failed", res.Key, res.Attempts, code)
	case res.Status == ledger.StatusFailed && res.Attempts > 1:
		u.noticef("%s: failed after %d attempts, exit %d", res.Key, res.Attempts, code)
	case res.Status == ledger.StatusRetryable && res.TimedOut:
		u.noticef("%s: attempt %d stopped at the deadline, exit %d; recorded as retryable", res.Key, res.Attempts, code)
	case res.Status == ledger.StatusRetryable:
		u.noticef("%s: attempt %d exited %d and the deadline leaves no time for another; recorded as retryable", res.Key, res.Attempts, code)
	}
}

func outputNote(rec *ledger.Record) string {
	if !rec.OutputStored {
		return "; output was not stored (--no-output)"
	}
	return ""
}

func lookupEnv(env []string, name string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func readPayload(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usagef("check the --payload-file path", "cannot read --payload-file: %v", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPayload+1))
	if err != nil {
		return nil, usagef("check the --payload-file path", "cannot read --payload-file %s: %v", path, err)
	}
	if len(b) > maxPayload {
		return nil, usagef("hash large inputs yourself and pass the hash with --payload", "--payload-file %s is larger than 64MiB", path)
	}
	return b, nil
}

// readLimited reads stdin for --stdin spool, refusing more than max bytes.
func readLimited(r io.Reader, max int64) ([]byte, error) {
	limit := max + 1 // one more, to tell "too large" from "exactly max"
	if limit < max {
		limit = max // max+1 overflowed: LimitReader would read nothing
	}
	b, err := io.ReadAll(io.LimitReader(r, limit))
	if err != nil {
		return nil, &exitError{code: exitcode.IOErr, msg: fmt.Sprintf("read stdin for --stdin spool: %v", err)}
	}
	if int64(len(b)) > max {
		return nil, usagef("raise --max-output, or use --stdin pass", "stdin is larger than --max-output (%d bytes) with --stdin spool", max)
	}
	return b, nil
}

// ledgerOwner is the uid that owns l's file, when l is a file (SQLite):
// idem trusts that user's run lock and processes besides its own (a root
// idem on a service's ledger). A database ledger has none.
func ledgerOwner(l ledger.Ledger) []int {
	var st syscall.Stat_t
	if syscall.Stat(l.Describe(), &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil
	}
	return []int{int(st.Uid)}
}
