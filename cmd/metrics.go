package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/ledger"
)

type metricsOptions struct {
	textfile  string
	separator string
	maxGroups int
	labels    []string
}

func newMetricsCmd(a *app) *cobra.Command {
	o := &metricsOptions{}
	c := &cobra.Command{
		Use:   "metrics",
		Short: "Print the ledger's state and counters for Prometheus",
		Long: `Print the ledger's state in the Prometheus text exposition format:
gauges for what is there now (records by status, keys in progress and the
age of the oldest, in-progress keys whose lease expired, the last success
of each key group) and counters that only grow (runs and attempts by
outcome, duplicates suppressed, records purged or expired).

A key's group is the key up to its first --group-separator (the whole key
when it has none); past --max-groups groups, in name order, the rest are
reported together as group "other". A group's last success outlives its
records: purge keeps it (for the key up to its first ':').

--textfile PATH writes the same to PATH atomically (a temporary file in the
same directory, then a rename), for node_exporter's textfile collector; the
file name must end in .prom. Run it from root's crontab (another user
writes to a directory of its own, linked into node_exporter's: see
docs/operators.md):

  PATH=/usr/local/bin:/usr/bin:/bin
  * * * * * idem metrics --textfile /var/lib/prometheus/node-exporter/idem.prom

Every series has a ledger label, the ledger's path (a PostgreSQL ledger's
address, without its password), so that two ledgers exported to one
directory stay apart; --label ledger=NAME names it instead, --label ledger=
leaves it out, and --label NAME=VALUE (repeatable) adds labels of your own.

The counters live in the ledger's records; a record's counts move to the
ledger's totals when it is purged or expires, so no counter goes down.`,
		Example: `  # look at the numbers
  idem metrics

  # feed node_exporter (its --collector.textfile.directory)
  idem metrics --textfile /var/lib/prometheus/node-exporter/idem.prom

  # keys such as backup.db1.2026-12-02 grouped by their first part
  idem metrics --group-separator .

  # two ledgers, one textfile directory: a name for each
  idem --ledger /srv/backups/ledger.db metrics --label ledger=backups --textfile /var/lib/idem-metrics/backups.prom`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			return runMetrics(c.Context(), a, o)
		},
	}
	f := c.Flags()
	f.SortFlags = false
	f.StringVar(&o.textfile, "textfile", "", "write to this .prom file atomically instead of stdout")
	f.StringVar(&o.separator, "group-separator", ":", "a key's group is the key up to its first SEPARATOR")
	f.IntVar(&o.maxGroups, "max-groups", ledger.DefaultMaxGroups, "report at most this many groups one by one; the rest as group \"other\"")
	f.StringArrayVar(&o.labels, "label", nil, "add NAME=VALUE to every series (repeatable); ledger=NAME replaces the default ledger label, ledger= drops it")
	helpSection(a, c, exitSection(
		exitLine{exitcode.OK, "printed, or written"},
		exitLine{exitcode.Usage, "usage: bad flag"},
		exitLine{exitcode.IOErr, "ledger cannot be opened or read, or the text file cannot be written"},
	))
	return c
}

func runMetrics(ctx context.Context, a *app, o *metricsOptions) error {
	if o.separator == "" {
		return usagef("give a separator such as : or .", "--group-separator must not be empty")
	}
	if o.maxGroups < 1 {
		return usagef("give a positive number", "--max-groups must be at least 1 (got %d)", o.maxGroups)
	}
	if o.textfile != "" && !strings.HasSuffix(o.textfile, ".prom") {
		return usagef("node_exporter reads only files named *.prom", "--textfile %q does not end in .prom", o.textfile)
	}
	labels, err := a.metricsLabels(o.labels)
	if err != nil {
		return err
	}
	req := ledger.MetricsRequest{Separator: o.separator, MaxGroups: o.maxGroups}
	m := &ledger.Metrics{Records: map[ledger.Status]int64{}}
	var nl *noLedgerError
	switch l, err := a.openExistingLedger(ctx, true); {
	case errors.As(err, &nl):
		// Nothing was recorded yet: every count is zero.
	case err != nil:
		return err
	default:
		defer l.Close()
		if m, err = l.Metrics(ctx, req); err != nil {
			return err
		}
	}
	var b strings.Builder
	writeMetrics(&b, m, labels...)
	if o.textfile == "" {
		if _, err := io.WriteString(a.stdout, b.String()); err != nil {
			return &exitError{code: exitcode.IOErr, msg: fmt.Sprintf("write the metrics: %v", err)}
		}
		return nil
	}
	return writeTextfile(o.textfile, b.String())
}

// writeTextfile replaces path with text atomically (writeAtomic):
// node_exporter reads either the old file or the new one, never half of
// one. The file is world-readable (node_exporter runs as its own user); it
// holds counts and key groups, no output. The temporary name does not end
// in .prom, so node_exporter skips it.
func writeTextfile(path, text string) error {
	if err := writeAtomic(path, []byte(text)); err != nil {
		return &exitError{code: exitcode.IOErr, msg: fmt.Sprintf("write %s: %v", path, err),
			hint: "check that the directory exists and is writable"}
	}
	return nil
}

// metricsLabels returns the labels every series gets, as name, value
// pairs: the ledger's description as ledger (unless --label ledger=
// replaces or, empty, drops it), then the --label flags in their order.
func (a *app) metricsLabels(flags []string) ([]string, error) {
	var out []string
	ledgerSet := false
	seen := map[string]bool{}
	for _, f := range flags {
		name, value, ok := strings.Cut(f, "=")
		switch {
		case !ok:
			return nil, usagef("give --label NAME=VALUE", "--label %q has no '='", f)
		case !validLabelName(name):
			return nil, usagef("a label name is a letter or '_', then letters, digits or '_', and does not start with '__'",
				"--label %q: %q is not a Prometheus label name", f, name)
		case name == "status" || name == "outcome" || name == "group" || name == "reason":
			return nil, usagef("pick another name", "--label %q: idem's own series use the label %s", f, name)
		case seen[name]:
			return nil, usagef("give each label once", "--label %s is given twice", name)
		case !utf8.ValidString(value):
			return nil, usagef("give a UTF-8 value", "--label %s: the value is not valid UTF-8", name)
		}
		seen[name] = true
		if name == "ledger" {
			ledgerSet = true
		}
		if value != "" {
			out = append(out, name, value)
		}
	}
	if !ledgerSet {
		if loc, err := a.ledgerPath(); err == nil {
			out = append([]string{"ledger", a.describe(loc)}, out...)
		}
	}
	return out, nil
}

// validLabelName reports whether s is a Prometheus label name that is not
// reserved: [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__".
func validLabelName(s string) bool {
	if s == "" || strings.HasPrefix(s, "__") {
		return false
	}
	for i, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// writeMetrics renders m in the Prometheus text exposition format
// (version 0.0.4): a HELP and a TYPE line per metric, label values
// escaped, no timestamps (node_exporter's textfile collector refuses
// them), and every series of a label set present even when zero, so that
// rate() and absence alerts behave from the first scrape. fixed (name,
// value pairs) follow each series' own labels.
func writeMetrics(w io.Writer, m *ledger.Metrics, fixed ...string) {
	family := func(name, typ, help string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	sample := func(name string, v float64, labels ...string) {
		labels = append(labels, fixed...)
		var l strings.Builder
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				l.WriteByte(',')
			}
			fmt.Fprintf(&l, `%s="%s"`, labels[i], escapeLabel(labels[i+1]))
		}
		if l.Len() > 0 {
			fmt.Fprintf(w, "%s{%s} %s\n", name, l.String(), strconv.FormatFloat(v, 'f', -1, 64))
			return
		}
		fmt.Fprintf(w, "%s %s\n", name, strconv.FormatFloat(v, 'f', -1, 64))
	}
	family("idem_records", "gauge", "Records in the ledger by status, not counting expired ones.")
	for _, st := range []ledger.Status{ledger.StatusInProgress, ledger.StatusSucceeded, ledger.StatusFailed, ledger.StatusRetryable} {
		sample("idem_records", float64(m.Records[st]), "status", string(st))
	}
	family("idem_records_expired", "gauge", "Records past their TTL: they count as absent until purged or run again.")
	sample("idem_records_expired", float64(m.Expired))
	family("idem_in_progress_stuck", "gauge", "In-progress keys whose lease expired: their idem is gone, and the next run takes them over.")
	sample("idem_in_progress_stuck", float64(m.Stuck))
	family("idem_in_progress_oldest_age_seconds", "gauge", "How long the longest-running in-progress key has run (0 when none is).")
	oldest := 0.0
	if !m.OldestInProgress.IsZero() {
		oldest = max(m.Now.Sub(m.OldestInProgress).Seconds(), 0)
	}
	sample("idem_in_progress_oldest_age_seconds", oldest)
	family("idem_last_success_timestamp_seconds", "gauge", "When a key group last succeeded (Unix time); groups past --max-groups are reported together as group \"other\", with the latest of their times.")
	for _, g := range m.LastSuccess {
		sample("idem_last_success_timestamp_seconds", unixSeconds(g), "group", g.Group)
	}
	if m.OtherGroups > 0 {
		sample("idem_last_success_timestamp_seconds", unixSeconds(ledger.GroupSuccess{Last: m.Other}), "group", "other")
	}
	family("idem_last_success_other_groups", "gauge", "How many key groups are reported as group \"other\".")
	sample("idem_last_success_other_groups", float64(m.OtherGroups))

	c := m.Counters
	family("idem_runs_total", "counter", "Invocations that ran the command and recorded an outcome, by outcome.")
	sample("idem_runs_total", float64(c.RunsSucceeded), "outcome", "succeeded")
	sample("idem_runs_total", float64(c.RunsFailed), "outcome", "failed")
	sample("idem_runs_total", float64(c.RunsRetryable), "outcome", "retryable")
	family("idem_attempts_total", "counter", "Attempts of commands that ended, by class.")
	for i, v := range []int64{c.AttemptsSuccess, c.AttemptsTransient, c.AttemptsPermanent, c.AttemptsAbandoned, c.AttemptsInterrupted, c.AttemptsTimeout} {
		sample("idem_attempts_total", float64(v), "outcome", ledger.AttemptClasses[i])
	}
	family("idem_replays_total", "counter", "Duplicates suppressed: repeats answered from the ledger without running the command.")
	sample("idem_replays_total", float64(c.Replays))
	family("idem_records_removed_total", "counter", "Records removed, by idem purge or because a run found them past their TTL.")
	sample("idem_records_removed_total", float64(m.Purged), "reason", "purge")
	sample("idem_records_removed_total", float64(m.ExpiredRemoved), "reason", "expired")
}

func unixSeconds(g ledger.GroupSuccess) float64 {
	return float64(g.Last.UnixMilli()) / 1000
}

// escapeLabel escapes a label value as the exposition format wants:
// backslash, double quote and line feed.
func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
