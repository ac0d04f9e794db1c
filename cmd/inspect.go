package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/fatih/color"
	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/flagval"
	"github.com/idemhq/idem/internal/key"
	"github.com/idemhq/idem/internal/ledger"
)

// timeFormat is RFC 3339 in UTC with milliseconds, the ledger's precision.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

type inspectOptions struct {
	statuses []string
	prefix   string
	since    string
	limit    int
	json     bool
	stdout   bool
	stderr   bool
}

func newInspectCmd(a *app) *cobra.Command {
	o := &inspectOptions{}
	c := &cobra.Command{
		Use:   "inspect [KEY]",
		Short: "List recent records, or show one key with its attempt history",
		Long: `Without KEY, list the ledger's records, newest outcome first (a record in
progress counts from its creation): key, status, attempts used of the budget,
last exit code, replays (duplicates suppressed), age and run time.

With KEY, show that record: its command, fingerprint, lease owner while in
progress, expiry, replays and every attempt (start, run time, exit code,
class, delay before the next). --stdout and --stderr write the recorded
output byte for byte instead.

--json prints the same as JSON (an array without KEY, an object with it);
times are RFC 3339 in UTC, durations in milliseconds. The fields are listed
in the README and stay stable.`,
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
	c.SetHelpTemplate(helpTemplate() + `
EXIT STATUS
   0  listed, or shown
   1  no record for KEY (or, with --stdout/--stderr, no stored output)
  64  usage: bad flag, status, prefix or key
  74  ledger cannot be opened or read
`)
	return c
}

// helpTemplate is cobra's default; each command appends its EXIT STATUS.
func helpTemplate() string { return (&cobra.Command{}).HelpTemplate() }

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
		if f.Since, err = parseSince(o.since, time.Now()); err != nil {
			return err
		}
	}
	var (
		recs  []*ledger.Record
		where string
		nl    *noLedgerError
	)
	switch l, err := a.openExistingLedger(ctx); {
	case errors.As(err, &nl):
		where = nl.path + " (not created yet)"
	case err != nil:
		return err
	default:
		defer l.Close()
		where = l.Describe()
		if recs, err = l.List(ctx, f); err != nil {
			return err
		}
	}
	now := time.Now()
	if o.json {
		out := make([]recordJSON, len(recs))
		for i, r := range recs {
			out[i] = toRecordJSON(r, now)
		}
		return writeJSON(a.stdout, out)
	}
	fmt.Fprintf(a.stdout, "ledger: %s\n", where)
	if len(recs) == 0 {
		fmt.Fprintln(a.stdout, "no records")
		return nil
	}
	rows := [][]string{{"KEY", "STATUS", "ATTEMPTS", "EXIT", "REPLAYS", "AGE", "DURATION"}}
	for _, r := range recs {
		rows = append(rows, []string{r.Key, statusCell(r, now), fmt.Sprintf("%d/%d", r.Attempts, r.MaxAttempts),
			exitCell(r), strconv.FormatInt(r.Replays, 10), age(now.Sub(r.OutcomeTime())), durationCell(r, now)})
	}
	paint := statusPainter(a)
	writeTable(a.stdout, rows, func(row, col int, cell string) string {
		if row == 0 || col != 1 {
			return cell
		}
		return paint(recs[row-1].Status, cell)
	})
	if o.limit > 0 && len(recs) == o.limit {
		a.ui.noticef("showing the newest %d records; --limit 0 shows all", o.limit)
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
	l, err := a.openExistingLedger(ctx)
	var nl *noLedgerError
	if errors.As(err, &nl) {
		return &exitError{code: ExitNotFound, msg: fmt.Sprintf("no record for key %q: %v", k, nl)}
	}
	if err != nil {
		return err
	}
	defer l.Close()
	r, err := l.Get(ctx, k)
	if errors.Is(err, ledger.ErrNotFound) {
		return &exitError{code: ExitNotFound, msg: fmt.Sprintf("no record for key %q in %s", k, l.Describe())}
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
	now := time.Now()
	if o.json {
		d := detailJSON{recordJSON: toRecordJSON(r, now), StdoutBytes: len(r.Stdout), StderrBytes: len(r.Stderr),
			History: make([]attemptJSON, len(hist))}
		for i, h := range hist {
			d.History[i] = toAttemptJSON(h)
		}
		return writeJSON(a.stdout, d)
	}
	showRecord(a, l.Describe(), r, hist, now)
	return nil
}

// writeOutput writes one stored stream exactly as recorded.
func writeOutput(a *app, r *ledger.Record, stdout bool) error {
	name, b, cut := "stderr", r.Stderr, r.StderrTruncated
	if stdout {
		name, b, cut = "stdout", r.Stdout, r.StdoutTruncated
	}
	if !r.OutputStored {
		return &exitError{code: ExitNotFound, msg: fmt.Sprintf("key %q has no stored output: it ran with --no-output", r.Key)}
	}
	if _, err := a.stdout.Write(b); err != nil {
		return &exitError{code: ExitIO, msg: fmt.Sprintf("write the recorded %s: %v", name, err)}
	}
	if cut {
		a.ui.warnf("the recorded %s of %s was truncated at --max-output", name, r.Key)
	}
	return nil
}

func showRecord(a *app, where string, r *ledger.Record, hist []ledger.Attempt, now time.Time) {
	paint := statusPainter(a)
	var rows [][]string
	add := func(k, v string) { rows = append(rows, []string{k + ":", v}) }
	add("ledger", where)
	add("key", r.Key)
	add("status", paint(r.Status, statusCell(r, now)))
	if r.HasExit {
		add("exit code", fmt.Sprintf("%d (from %s)", r.ExitCode, r.ExitSource))
	}
	add("command", quoteArgv(r.Command))
	add("fingerprint", r.Fingerprint)
	add("attempts", fmt.Sprintf("%d of %d", r.Attempts, r.MaxAttempts))
	add("created", stamp(r.Created, now))
	if r.Status == ledger.StatusInProgress {
		add("running", fmt.Sprintf("since %s", stamp(r.Started, now)))
		lease := "expired " + stamp(r.LeaseExpiry, now) + ": the next run takes it over"
		if r.Live(now, nil) {
			lease = "expires " + stamp(r.LeaseExpiry, now)
		}
		add("owner", fmt.Sprintf("%s, pid %d, token %d; lease %s", r.Owner.Host, r.Owner.PID, r.Token, lease))
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
	writeTable(a.stdout, rows, nil)
	fmt.Fprintln(a.stdout)
	if len(hist) == 0 {
		fmt.Fprintln(a.stdout, "no attempts recorded")
		return
	}
	rows = [][]string{{"ATTEMPT", "STARTED", "DURATION", "EXIT", "CLASS", "DELAY", "HOST", "PID"}}
	for _, h := range hist {
		dur, code, class, delay := "running", "-", "-", "-"
		if !h.Ended.IsZero() {
			dur = span(h.Ended.Sub(h.Started))
		}
		if h.HasExit {
			code = strconv.Itoa(h.ExitCode)
		}
		if h.Class != "" {
			class = h.Class
		}
		if h.Delay > 0 {
			delay = span(h.Delay)
		}
		rows = append(rows, []string{strconv.Itoa(h.N), h.Started.UTC().Format(timeFormat), dur, code, class, delay,
			h.Host, strconv.Itoa(h.PID)})
	}
	writeTable(a.stdout, rows, nil)
}

func bytesNote(n int, truncated bool) string {
	s := fmt.Sprintf("%d bytes", n)
	if n == 1 {
		s = "1 byte"
	}
	if truncated {
		s += " (truncated)"
	}
	return s
}

// stamp renders a time for people: RFC 3339 UTC and how far from now.
func stamp(t, now time.Time) string {
	d := now.Sub(t)
	rel := age(d) + " ago"
	if d < 0 {
		rel = "in " + age(-d)
	}
	return fmt.Sprintf("%s (%s)", t.UTC().Format(timeFormat), rel)
}

// span renders a duration compactly: 12ms, 1.5s, 4m3s, 2h5m, 3d4h.
func span(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		d = d.Round(time.Second)
		return twoUnits(int(d.Minutes()), "m", int(d.Seconds())%60, "s")
	case d < 48*time.Hour:
		d = d.Round(time.Minute)
		return twoUnits(int(d.Hours()), "h", int(d.Minutes())%60, "m")
	}
	d = d.Round(time.Hour)
	return twoUnits(int(d.Hours())/24, "d", int(d.Hours())%24, "h")
}

// twoUnits renders "4m3s", or "4m" when the smaller unit is zero.
func twoUnits(big int, bigUnit string, small int, smallUnit string) string {
	if small == 0 {
		return strconv.Itoa(big) + bigUnit
	}
	return strconv.Itoa(big) + bigUnit + strconv.Itoa(small) + smallUnit
}

func statusCell(r *ledger.Record, now time.Time) string {
	s := string(r.Status)
	switch {
	case r.Expired(now):
		s += " (expired)"
	case r.Status == ledger.StatusInProgress && !r.Live(now, nil):
		s += " (lease expired)"
	}
	return s
}

func exitCell(r *ledger.Record) string {
	if !r.HasExit {
		return "-"
	}
	return strconv.Itoa(r.ExitCode)
}

func durationCell(r *ledger.Record, now time.Time) string {
	if r.Status == ledger.StatusInProgress {
		return span(now.Sub(r.Started)) + "+"
	}
	return span(r.Duration)
}

// writeTable prints rows with columns padded to their widest cell; paint,
// when set, may decorate a cell after its width was measured.
func writeTable(w io.Writer, rows [][]string, paint func(row, col int, cell string) string) {
	var widths []int
	for _, row := range rows {
		for i, cell := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len(cell))
		}
	}
	var b strings.Builder
	for r, row := range rows {
		b.Reset()
		for i, cell := range row {
			pad := widths[i] - len(cell)
			if paint != nil {
				cell = paint(r, i, cell)
			}
			b.WriteString(cell)
			if i < len(row)-1 {
				b.WriteString(strings.Repeat(" ", pad+2))
			}
		}
		b.WriteByte('\n')
		io.WriteString(w, b.String())
	}
}

// statusPainter colours a status on a terminal only: when stdout is one,
// --color allows it and NO_COLOR is unset (or --color always).
func statusPainter(a *app) func(ledger.Status, string) string {
	on := a.colorOn(a.stdout)
	colours := map[ledger.Status]*color.Color{
		ledger.StatusSucceeded:  color.New(color.FgGreen),
		ledger.StatusFailed:     color.New(color.FgRed, color.Bold),
		ledger.StatusRetryable:  color.New(color.FgYellow),
		ledger.StatusInProgress: color.New(color.FgCyan),
	}
	for _, c := range colours {
		if on {
			c.EnableColor()
		} else {
			c.DisableColor()
		}
	}
	return func(s ledger.Status, text string) string {
		if c, ok := colours[s]; ok && on {
			return c.Sprint(text)
		}
		return text
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

// recordJSON is one record in `idem inspect --json`. The README documents
// every field; add fields, never rename or remove them.
type recordJSON struct {
	Key             string     `json:"key"`
	Status          string     `json:"status"`
	Attempts        int        `json:"attempts"`
	MaxAttempts     int        `json:"max_attempts"`
	ExitCode        *int       `json:"exit_code"`
	ExitSource      *string    `json:"exit_source"`
	Replays         int64      `json:"replays"`
	LastReplay      *string    `json:"last_replay"`
	Created         string     `json:"created"`
	Started         string     `json:"started"`
	Finished        *string    `json:"finished"`
	DurationMS      *int64     `json:"duration_ms"`
	TTLMS           *int64     `json:"ttl_ms"`
	Expires         *string    `json:"expires"`
	Expired         bool       `json:"expired"`
	Command         []string   `json:"command"`
	Fingerprint     string     `json:"fingerprint"`
	OutputStored    bool       `json:"output_stored"`
	StdoutTruncated bool       `json:"stdout_truncated"`
	StderrTruncated bool       `json:"stderr_truncated"`
	Owner           *ownerJSON `json:"owner"`
}

// ownerJSON is the lease holder of an in_progress record.
type ownerJSON struct {
	Host         string `json:"host"`
	PID          int    `json:"pid"`
	Token        int64  `json:"token"`
	LeaseExpires string `json:"lease_expires"`
	LeaseExpired bool   `json:"lease_expired"`
	ChildPGID    *int   `json:"child_pgid"`
}

// detailJSON is `idem inspect KEY --json`: the record plus its history.
type detailJSON struct {
	recordJSON
	StdoutBytes int           `json:"stdout_bytes"`
	StderrBytes int           `json:"stderr_bytes"`
	History     []attemptJSON `json:"history"`
}

// attemptJSON is one attempt in the history.
type attemptJSON struct {
	N          int     `json:"n"`
	Token      int64   `json:"token"`
	Host       string  `json:"host"`
	PID        int     `json:"pid"`
	Started    string  `json:"started"`
	Ended      *string `json:"ended"`
	DurationMS *int64  `json:"duration_ms"`
	ExitCode   *int    `json:"exit_code"`
	Class      *string `json:"class"`
	DelayMS    int64   `json:"delay_ms"`
}

func jsonTime(t time.Time) string { return t.UTC().Format(timeFormat) }

func jsonTimeOrNull(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := jsonTime(t)
	return &s
}

func ptr[T any](v T) *T { return &v }

func toRecordJSON(r *ledger.Record, now time.Time) recordJSON {
	j := recordJSON{Key: r.Key, Status: string(r.Status), Attempts: r.Attempts, MaxAttempts: r.MaxAttempts,
		Replays: r.Replays, LastReplay: jsonTimeOrNull(r.LastReplay), Created: jsonTime(r.Created),
		Started: jsonTime(r.Started), Finished: jsonTimeOrNull(r.Finished), Expires: jsonTimeOrNull(r.Expires),
		Expired: r.Expired(now), Command: r.Command, Fingerprint: r.Fingerprint, OutputStored: r.OutputStored,
		StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated}
	if j.Command == nil {
		j.Command = []string{}
	}
	if r.HasExit {
		j.ExitCode, j.ExitSource = ptr(r.ExitCode), ptr(r.ExitSource)
	}
	if !r.Finished.IsZero() {
		j.DurationMS = ptr(r.Duration.Milliseconds())
	}
	if r.TTL > 0 {
		j.TTLMS = ptr(r.TTL.Milliseconds())
	}
	if r.Status == ledger.StatusInProgress {
		o := &ownerJSON{Host: r.Owner.Host, PID: r.Owner.PID, Token: r.Token, LeaseExpires: jsonTime(r.LeaseExpiry),
			LeaseExpired: !r.Live(now, nil)}
		if r.Owner.ChildPGID != 0 {
			o.ChildPGID = ptr(r.Owner.ChildPGID)
		}
		j.Owner = o
	}
	return j
}

func toAttemptJSON(h ledger.Attempt) attemptJSON {
	j := attemptJSON{N: h.N, Token: h.Token, Host: h.Host, PID: h.PID, Started: jsonTime(h.Started),
		Ended: jsonTimeOrNull(h.Ended), DelayMS: h.Delay.Milliseconds()}
	if !h.Ended.IsZero() {
		j.DurationMS = ptr(h.Ended.Sub(h.Started).Milliseconds())
	}
	if h.HasExit {
		j.ExitCode = ptr(h.ExitCode)
	}
	if h.Class != "" {
		j.Class = ptr(h.Class)
	}
	return j
}

// writeJSON prints v indented, with a final newline, leaving <, > and &
// as they are.
func writeJSON(w io.Writer, v any) error {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return &exitError{code: ExitIO, msg: fmt.Sprintf("write JSON: %v", err)}
	}
	return nil
}
