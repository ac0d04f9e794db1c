package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/flagval"
	"github.com/idemhq/idem/internal/key"
	"github.com/idemhq/idem/internal/ledger"
)

type inspectOptions struct {
	statuses []string
	prefix   string
	since    string
	limit    int
	json     bool
	stdout   bool
	stderr   bool
	times    string
	loc      *time.Location
	pageSize int // records per page of the listing; 0: the ledger's default
}

func newInspectCmd(a *app) *cobra.Command {
	o := &inspectOptions{}
	c := &cobra.Command{
		Use:   "inspect [KEY]",
		Short: "List recent records, or show one key with its attempt history",
		Long: `Without KEY, list the ledger's records, newest outcome first (a record in
progress counts from its creation): key, status, attempts used of the budget,
last exit code, replays (duplicates suppressed), age, run time and, last,
why a failed or retryable record failed: idem's own reason (timeout,
signal, abandoned, budget spent) or "exit N:" and the last line its
command wrote to stderr. The list streams: it is read a page at a time,
so a ledger of millions of records prints at once in constant memory.

With KEY, show that record: its command, working directory and user,
fingerprint, lease owner while in progress, expiry, replays, the end of its
stderr (for a failed or retryable record; control characters escaped) and
every attempt (start, run time, exit code, class, delay before the next,
the last line of its own stderr). --stdout and --stderr write the recorded
output byte for byte instead.

Times are shown in UTC; --time local shows them in the local time zone
(TZ=Europe/Paris idem inspect --time local KEY).

--json prints the same as JSON (an array without KEY, an object with it);
times are RFC 3339 in UTC, durations in milliseconds. The fields are listed
in docs/operators.md and stay stable.`,
		Example: `  # what ran in the last hour, and what is still running
  idem inspect --since 1h
  idem inspect --status in_progress

  # one key: why did it fail, how often was it retried and replayed
  idem inspect deploy:prod:4f2a9c1

  # the recorded output, exactly as the command wrote it
  idem inspect --stdout report:2026-12 > report.txt`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeKeys(a, 1),
		RunE: func(c *cobra.Command, args []string) error {
			switch o.times {
			case "utc":
				o.loc = time.UTC
			case "local":
				o.loc = time.Local
			default:
				return usagef("use --time utc or --time local", "invalid --time %q", o.times)
			}
			if len(args) == 1 {
				return runInspectKey(c.Context(), a, o, c.Flags().Changed, args[0])
			}
			return runInspectList(c.Context(), a, o)
		},
	}
	f := c.Flags()
	f.SortFlags = false
	f.StringSliceVar(&o.statuses, "status", nil, "only these statuses: in_progress, succeeded, failed, retryable (repeat or comma-separate)")
	f.StringVar(&o.prefix, "prefix", "", "only keys that start with PREFIX")
	f.StringVar(&o.since, "since", "", "only records whose outcome is this recent (30m, 2d) or at/after an RFC 3339 time")
	f.IntVar(&o.limit, "limit", 50, "show at most this many records; 0: all")
	f.BoolVar(&o.json, "json", false, "print JSON")
	f.BoolVar(&o.stdout, "stdout", false, "with KEY: write the recorded stdout, raw")
	f.BoolVar(&o.stderr, "stderr", false, "with KEY: write the recorded stderr, raw")
	f.StringVar(&o.times, "time", "utc", "show times in utc or local (the TZ variable's zone)")
	f.IntVar(&o.pageSize, "page-size", 0, "records read per query (default 1000)")
	f.MarkHidden("page-size")
	helpSection(a, c, exitSection(
		exitLine{exitcode.OK, "listed, or shown"},
		exitLine{exitcode.NoRecord, "no record for KEY (or, with --stdout/--stderr, no stored output)"},
		exitLine{exitcode.Usage, "usage: bad flag, status, prefix or key"},
		exitLine{exitcode.IOErr, "ledger cannot be opened or read"},
	))
	return c
}

func runInspectList(ctx context.Context, a *app, o *inspectOptions) error {
	if o.stdout || o.stderr {
		return usagef("idem inspect --stdout KEY", "--stdout and --stderr need a KEY")
	}
	f := ledger.ListFilter{Prefix: o.prefix, Limit: o.limit}
	if o.limit < 0 {
		return usagef("use --limit 0 to show every record", "--limit must not be negative (got %d)", o.limit)
	}
	var err error
	if f.Statuses, err = parseStatuses(o.statuses); err != nil {
		return err
	}
	if err := checkPrefix(o.prefix); err != nil {
		return err
	}
	if o.since != "" {
		if f.Since, err = parseSince(o.since, a.now()); err != nil {
			return err
		}
	}
	f.PageSize = o.pageSize
	var (
		l     ledger.Ledger
		where string
		nl    *noLedgerError
	)
	switch l, err = a.openExistingLedger(ctx, true); {
	case errors.As(err, &nl):
		where, l = nl.path+" (not created yet)", nil
		if h := nl.hint(); h != "" && !o.json {
			a.ui.noticef("%s", h)
		}
	case err != nil:
		return err
	default:
		defer l.Close()
		where = l.Describe()
	}
	// Ages and --since are on the clock that stamped the records (a
	// PostgreSQL server's), not this host's.
	now := a.now()
	if l != nil {
		now = ledger.NowOf(l, a.now)
		if o.since != "" {
			f.Since, _ = parseSince(o.since, now) // checked above
		}
	}
	each := func(fn func(*ledger.Record) error) error {
		if l == nil {
			return nil
		}
		return l.Each(ctx, f, fn)
	}
	w := newFlusher(a.stdout, "the listing")
	if o.json {
		return w.done(writeJSONStream(w, each, now, flushEvery(f)))
	}
	fmt.Fprintf(w, "ledger: %s\n", where)
	t := &streamTable{w: w, paint: statusPainter(a)}
	t.add(nil, []string{"KEY", "STATUS", "ATTEMPTS", "EXIT", "REPLAYS", "AGE", "DURATION", "REASON"})
	n := 0
	err = each(func(r *ledger.Record) error {
		n++
		t.add(r, []string{escapeControls(r.Key, false), escapeControls(statusCell(r, now), false), fmt.Sprintf("%d/%d", r.Attempts, r.MaxAttempts),
			exitCell(r), strconv.FormatInt(r.Replays, 10), age(now.Sub(r.OutcomeTime())), durationCell(r, now),
			cut(escapeControls(reason(r), false), reasonWidth)})
		if n%flushEvery(f) == 0 {
			return t.flush()
		}
		return nil
	})
	if err != nil {
		return w.done(err)
	}
	if n == 0 {
		t.rows = nil
		fmt.Fprintln(w, "no records")
		return w.done(nil)
	}
	if err := w.done(t.flush()); err != nil {
		return err
	}
	if o.limit > 0 && n == o.limit {
		if o.limit == 1 {
			a.ui.noticef("showing the newest record; --limit 0 shows all")
		} else {
			a.ui.noticef("showing the newest %d records; --limit 0 shows all", o.limit)
		}
	}
	return nil
}

func runInspectKey(ctx context.Context, a *app, o *inspectOptions, changed func(string) bool, k string) error {
	for _, name := range []string{"status", "prefix", "since", "limit"} {
		if changed(name) {
			return usagef("filters apply to the list: idem inspect --"+name+" ...", "--%s does not apply to one KEY", name)
		}
	}
	modes := 0
	for _, on := range []bool{o.json, o.stdout, o.stderr} {
		if on {
			modes++
		}
	}
	if modes > 1 {
		return usagef("pick one of --json, --stdout and --stderr", "--json, --stdout and --stderr are exclusive")
	}
	if err := key.Validate(k); err != nil {
		return usagef("keys are built with: idem key PART...", "%v", err)
	}
	if tz, bad := badTZ(a.getenv); bad && o.loc == time.Local && modes == 0 {
		// Only the record's view shows times in the local zone.
		return usagef("set TZ to a zone of the IANA database (Europe/Berlin), or use --time utc",
			"TZ=%q names no time zone idem knows, and --time local would show UTC", tz)
	}
	l, err := a.openExistingLedger(ctx, true)
	var nl *noLedgerError
	if errors.As(err, &nl) {
		return &exitError{code: exitcode.NoRecord, msg: fmt.Sprintf("no record for key %q: %v", k, nl), hint: nl.hint()}
	}
	if err != nil {
		return err
	}
	defer l.Close()
	r, err := l.Get(ctx, k)
	if errors.Is(err, ledger.ErrNotFound) {
		return &exitError{code: exitcode.NoRecord, msg: fmt.Sprintf("no record for key %q in %s", k, l.Describe())}
	}
	if err != nil {
		return err
	}
	if o.stdout || o.stderr {
		return writeOutput(a, r, o.stdout)
	}
	hist, err := l.History(ctx, k)
	if err != nil {
		return err
	}
	now := ledger.NowOf(l, a.now) // the records' clock
	if o.json {
		d := detailJSON{recordJSON: toRecordJSON(r, now), StdoutBytes: len(r.Stdout), StderrBytes: len(r.Stderr),
			History: make([]attemptJSON, len(hist)), StderrTail: stderrTailJSON(r, hist)}
		for i, h := range hist {
			d.History[i] = toAttemptJSON(h)
		}
		return writeJSON(a.stdout, d)
	}
	w := newFlusher(a.stdout, "the record")
	showRecord(w, a, l.Describe(), r, hist, now, o.loc)
	return w.done(nil)
}

// writeOutput writes one stored stream exactly as recorded.
func writeOutput(a *app, r *ledger.Record, stdout bool) error {
	name, b, cut := "stderr", r.Stderr, r.StderrTruncated
	if stdout {
		name, b, cut = "stdout", r.Stdout, r.StdoutTruncated
	}
	if !r.OutputStored {
		return &exitError{code: exitcode.NoRecord, msg: fmt.Sprintf("key %q has no stored output: it ran with --no-output", r.Key)}
	}
	if _, err := a.stdout.Write(b); err != nil {
		return &exitError{code: exitcode.IOErr, msg: fmt.Sprintf("write the recorded %s: %v", name, err)}
	}
	if cut {
		a.ui.warnf("the recorded %s of %s was truncated at --max-output", name, r.Key)
	}
	return nil
}

// showRecord writes the record r and its attempts hist to w, for a
// person to read.
func showRecord(w io.Writer, a *app, where string, r *ledger.Record, hist []ledger.Attempt, now time.Time, loc *time.Location) {
	paint := statusPainter(a)
	stamp := func(t, now time.Time) string { return stampIn(t, now, loc) }
	var rows [][]string
	add := func(k, v string) { rows = append(rows, []string{k + ":", v}) }
	add("ledger", where)
	esc := func(s string) string { return escapeControls(s, false) }
	add("key", esc(r.Key))
	add("status", paint(r.Status, esc(statusCell(r, now))))
	if r.HasExit {
		add("exit code", fmt.Sprintf("%d (from %s)", r.ExitCode, esc(r.ExitSource)))
	}
	if why := reason(r); why != "" {
		add("reason", esc(why))
	}
	add("command", quoteArgv(r.Command))
	if r.Cwd != "" || r.User != "" {
		add("ran in", fmt.Sprintf("%s as %s", esc(orDash(r.Cwd)), esc(orDash(r.User))))
	}
	add("fingerprint", esc(r.Fingerprint))
	add("attempts", fmt.Sprintf("%d of %d", r.Attempts, r.MaxAttempts))
	add("created", stamp(r.Created, now))
	if r.Status == ledger.StatusInProgress {
		add("running", fmt.Sprintf("since %s", stamp(r.Started, now)))
		lease := "expired " + stamp(r.LeaseExpiry, now) + ": the next run takes it over"
		if r.Live(now, nil) {
			lease = "expires " + stamp(r.LeaseExpiry, now)
		}
		add("owner", fmt.Sprintf("%s, pid %d, token %d; lease %s", esc(r.Owner.Host), r.Owner.PID, r.Token, lease))
		if r.Owner.ChildPGID != 0 {
			add("child", fmt.Sprintf("process group %d", r.Owner.ChildPGID))
		}
	} else {
		add("finished", fmt.Sprintf("%s after %s", stamp(r.Finished, now), span(r.Duration)))
	}
	switch {
	case r.Expires.IsZero():
		add("expires", "never")
	case r.Expired(now):
		add("expires", fmt.Sprintf("expired %s (--ttl %s): counts as absent", stamp(r.Expires, now), span(r.TTL)))
	default:
		add("expires", fmt.Sprintf("%s (--ttl %s)", stamp(r.Expires, now), span(r.TTL)))
	}
	replays := strconv.FormatInt(r.Replays, 10)
	if !r.LastReplay.IsZero() {
		replays += ", last " + stamp(r.LastReplay, now)
	}
	add("replays", replays)
	switch {
	case !r.OutputStored:
		add("output", "not stored (--no-output)")
	case r.Status == ledger.StatusInProgress:
		add("output", "none yet")
	default:
		add("output", fmt.Sprintf("stdout %s, stderr %s", bytesNote(len(r.Stdout), r.StdoutTruncated), bytesNote(len(r.Stderr), r.StderrTruncated)))
	}
	writeTable(w, rows, nil)
	if tail, total, ok := stderrTail(r, hist); ok && (r.Status == ledger.StatusFailed || r.Status == ledger.StatusRetryable) {
		fmt.Fprintln(w)
		if len(tail) < total {
			fmt.Fprintf(w, "stderr, last %s of %s (all of it: idem inspect --stderr %s):\n", size(int64(len(tail))), size(int64(total)), esc(r.Key))
		} else {
			fmt.Fprintf(w, "stderr (%s):\n", size(int64(total)))
		}
		for _, line := range strings.Split(strings.TrimRight(escapeControls(string(tail), true), "\n"), "\n") {
			fmt.Fprintf(w, "  | %s\n", line)
		}
	}
	fmt.Fprintln(w)
	if len(hist) == 0 {
		fmt.Fprintln(w, "no attempts recorded")
		return
	}
	rows = [][]string{{"ATTEMPT", "STARTED", "DURATION", "EXIT", "CLASS", "DELAY", "HOST", "PID", "STDERR"}}
	for _, h := range hist {
		dur, code, class, delay := "running", "-", "-", "-"
		if !h.Ended.IsZero() {
			dur = span(h.Ended.Sub(h.Started))
		}
		if h.HasExit {
			code = strconv.Itoa(h.ExitCode)
		}
		if h.Class != "" {
			class = esc(h.Class)
		}
		if h.Delay > 0 {
			delay = span(h.Delay)
		}
		rows = append(rows, []string{strconv.Itoa(h.N), h.Started.In(loc).Format(timeFormat), dur, code, class, delay,
			esc(h.Host), strconv.Itoa(h.PID), cut(esc(ledger.LastLine(h.StderrTail)), reasonWidth)})
	}
	// The last column is often empty: no line ends in spaces.
	var b strings.Builder
	writeTable(&b, rows, nil)
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		io.WriteString(w, strings.TrimRight(line, " \n")+strings.Repeat("\n", strings.Count(line, "\n")))
	}
}

func parseStatuses(in []string) ([]ledger.Status, error) {
	var out []ledger.Status
	for _, s := range in {
		st := ledger.Status(strings.TrimSpace(s))
		if !st.Valid() {
			return nil, usagef("statuses are in_progress, succeeded, failed and retryable", "invalid --status %q", s)
		}
		out = append(out, st)
	}
	return out, nil
}

// checkPrefix refuses a --prefix that no key can start with.
func checkPrefix(p string) error {
	if p == "" {
		return nil
	}
	if len(p) > key.MaxLen {
		return usagef("keys are at most 128 characters", "--prefix is longer than any key (%d characters)", len(p))
	}
	probe := p + strings.Repeat("0", max(0, key.MinLen-len(p)))
	if err := key.Validate(probe); err != nil {
		return usagef("keys are "+key.Rule, "--prefix %q can never match a key", p)
	}
	return nil
}

// parseSince accepts a duration before now (30m, 2d) or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := flagval.ParseDuration(s)
	if err != nil {
		return time.Time{}, usagef("give a duration such as 30m or 2d, or a time such as 2026-12-02T03:00:00Z", "invalid --since %q", s)
	}
	return now.Add(-d), nil
}
