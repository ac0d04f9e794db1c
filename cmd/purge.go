package cmd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/flagval"
	"github.com/idemhq/idem/internal/key"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/runner/procs"
)

type purgeOptions struct {
	keys      []string
	olderThan time.Duration
	statuses  []string
	prefix    string
	expired   bool
	all       bool
	force     bool
	dryRun    bool
	vacuum    bool
	olderSet  bool
}

func newPurgeCmd(a *app) *cobra.Command {
	o := &purgeOptions{}
	c := &cobra.Command{
		Use:   "purge [KEY...] [--older-than D] [--status S] [--prefix P] [--expired] [--all]",
		Short: "Remove records (and their history) from the ledger",
		Long: `Remove the named keys, or the records that match every selector given.
A removed key is absent: its next 'idem run' executes afresh.

--older-than measures from a record's outcome (its creation while it is in
progress), not from its replays; it accepts d (days) as well as h, m and s.
--expired selects records past their --ttl.

A record whose runs still have processes on this host (found by IDEM_RUN,
as a run finds them) is not removed without --force either: its key would
count as new, and a new key's run does not look for them. Purge names them
and exits 75.

A record in progress is never removed without --force, even when its lease
expired: its processes may still run (the run that takes the key over stops
them first). Purge names it and exits 75. With --force, the run that holds
it loses its lease: a living idem stops its command at its next ledger write
and records nothing; purge itself stops nothing, and processes of a run
whose idem is gone keep running until they end or the next run of the key
on their host stops them.

Records go in chunks of 5,000 per transaction, so a concurrent 'idem run'
waits at most a moment. --vacuum compacts the ledger afterwards (it holds
the ledger while it runs). Keys of removed records go to stdout with
--dry-run only; counts and warnings go to stderr.`,
		Example: `  # reset one key so that its next run executes again
  idem purge deploy:prod:4f2a9c1

  # see, then remove, what finished more than 30 days ago
  idem purge --older-than 30d --dry-run
  idem purge --older-than 30d --vacuum

  # forget failures under a prefix, and records past their --ttl
  idem purge --status failed --prefix nightly:
  idem purge --expired`,
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: completeKeys(a, 0),
		RunE: func(c *cobra.Command, args []string) error {
			o.keys = args
			o.olderSet = c.Flags().Changed("older-than")
			return runPurge(c.Context(), a, o)
		},
	}
	f := c.Flags()
	f.SortFlags = false
	f.Var(flagval.NewDuration(&o.olderThan, 0), "older-than", "records whose outcome is older than this (30d, 12h)")
	f.StringSliceVar(&o.statuses, "status", nil, "records with these statuses: in_progress, succeeded, failed, retryable")
	f.StringVar(&o.prefix, "prefix", "", "records whose key starts with PREFIX")
	f.BoolVar(&o.expired, "expired", false, "records past their --ttl")
	f.BoolVar(&o.all, "all", false, "every record")
	f.BoolVar(&o.force, "force", false, "also remove records in progress, lease expired or not (their runs lose the lease; purge stops no process)")
	f.BoolVarP(&o.dryRun, "dry-run", "n", false, "list the keys that would go; remove nothing")
	f.BoolVar(&o.vacuum, "vacuum", false, "compact the ledger afterwards")
	f.Lookup("older-than").DefValue = "0" // no "(default 0s)" in the help
	helpSection(a, c, exitSection(
		exitLine{exitcode.OK, "removed what was selected (or, with --dry-run, listed it)"},
		exitLine{exitcode.Usage, "usage: nothing selected, bad flag, status, prefix or key"},
		exitLine{exitcode.IOErr, "ledger cannot be opened, read or written"},
		exitLine{exitcode.TempFail, "a record in progress was kept (use --force to remove it)"},
	))
	return c
}

func (o *purgeOptions) selector() (ledger.Selector, error) {
	sel := ledger.Selector{Keys: o.keys, Prefix: o.prefix, OlderThan: o.olderThan, Expired: o.expired, All: o.all}
	var err error
	if sel.Statuses, err = parseStatuses(o.statuses); err != nil {
		return sel, err
	}
	for _, k := range o.keys {
		if err := key.Validate(k); err != nil {
			return sel, usagef("keys are built with: idem key PART...", "%v", err)
		}
	}
	if err := checkPrefix(o.prefix); err != nil {
		return sel, err
	}
	if o.olderSet && o.olderThan <= 0 {
		return sel, usagef("use --all to select every record", "--older-than must be more than 0")
	}
	others := len(o.keys) > 0 || len(sel.Statuses) > 0 || o.prefix != "" || o.olderSet || o.expired
	if o.all && others {
		return sel, usagef("--all already selects every record; drop it or the other selectors", "--all cannot be combined with keys or other selectors")
	}
	if sel.Empty() {
		hint := "name KEYs, or select with --older-than, --status, --prefix, --expired or --all"
		if o.vacuum {
			// Expired records already count as absent: removing them
			// changes no run's outcome.
			hint = "to compact the ledger alone: idem purge --expired --vacuum; else " + hint
		}
		return sel, usagef(hint, "nothing selected: purge needs keys or a selector")
	}
	return sel, nil
}

// vacuumChecker is a ledger that can tell beforehand whether this caller
// may compact it (PostgreSQL: only the tables' owner may).
type vacuumChecker interface {
	CheckVacuum(ctx context.Context) error
}

func runPurge(ctx context.Context, a *app, o *purgeOptions) error {
	sel, err := o.selector()
	if err != nil {
		return err
	}
	l, err := a.openExistingLedger(ctx, o.dryRun)
	var nl *noLedgerError
	if errors.As(err, &nl) {
		a.ui.noticef("nothing to purge: %v", nl)
		return nil
	}
	if err != nil {
		return err
	}
	defer l.Close()
	u := a.ui
	where := l.Describe()
	if c, ok := l.(vacuumChecker); ok && o.vacuum {
		// Refused before anything is removed, not after.
		if err := c.CheckVacuum(ctx); err != nil {
			return err
		}
	}
	if !o.force {
		if err := refuseLeftovers(ctx, l, sel); err != nil {
			return err
		}
	}
	res, err := l.Purge(ctx, ledger.PurgeRequest{Selector: sel, Force: o.force, DryRun: o.dryRun})
	if err != nil {
		if res != nil && res.Removed > 0 {
			u.noticef("removed %s from %s before the error", records(res.Removed), where)
		}
		return err
	}
	for _, k := range res.Missing {
		u.warnf("no record for key %q", k)
	}
	now := ledger.NowOf(l, a.now) // the records' clock
	for _, r := range res.Live {
		lease := "lease expires " + stamp(r.LeaseExpiry, now)
		if !r.LeaseExpiry.After(now) {
			lease = "lease expired " + stamp(r.LeaseExpiry, now) + "; its processes may still run"
		}
		holder := fmt.Sprintf("in progress on %s (pid %d, token %d, attempt %d/%d), %s",
			r.Owner.Host, r.Owner.PID, r.Token, r.Attempts, r.MaxAttempts, lease)
		left := fmt.Sprintf("purge stops no process: whatever of that run still runs on %s (IDEM_TOKEN=%d) keeps running until it ends or the next run of %s there stops it",
			r.Owner.Host, r.Token, r.Key)
		switch {
		case !o.force && o.dryRun:
			u.noticef("would keep %s: %s", r.Key, holder)
		case !o.force:
			u.noticef("kept %s: %s", r.Key, holder)
		case o.dryRun:
			u.warnf("would remove %s while %s; that run would lose its lease; %s", r.Key, holder, left)
		default:
			u.warnf("removed %s while %s; that run loses its lease and records nothing; %s", r.Key, holder, left)
		}
	}
	if o.dryRun {
		w := newFlusher(a.stdout, "the keys")
		for _, k := range res.Keys {
			fmt.Fprintln(w, k)
		}
		if err := w.done(nil); err != nil {
			return err
		}
		also := ""
		if o.vacuum {
			also = " and nothing compacted"
		}
		u.noticef("dry run: would remove %s from %s; nothing was removed%s", records(res.Removed), where, also)
	} else {
		u.noticef("removed %s from %s", records(res.Removed), where)
		if o.vacuum {
			v, err := l.Vacuum(ctx)
			if err != nil {
				return err
			}
			u.noticef("compacted %s: %s -> %s", where, size(v.Before), size(v.After))
		}
	}
	if kept := len(res.Live); kept > 0 && !o.force {
		verb := "kept"
		if o.dryRun {
			verb = "would keep"
		}
		return &exitError{code: exitcode.TempFail,
			msg:  fmt.Sprintf("%s %s in progress (their processes may still run)", verb, records(kept)),
			hint: "let them finish, or run the key again to take an expired one over, and purge again; or remove them now with --force"}
	}
	return nil
}

// refuseLeftovers refuses (75, nothing removed) a purge that selects a key
// of which processes of a run still live on this host: once its record is
// gone, the key's next run counts it as new and looks for none of them.
// Processes of no run of this ledger cost one scan and nothing else.
func refuseLeftovers(ctx context.Context, l ledger.Ledger, sel ledger.Selector) error {
	id := ledger.Identity(l)
	if id == "" {
		return nil
	}
	var secret []byte
	if g, ok := l.(ledger.RunGuarder); ok {
		if guard, err := g.RunGuard(ctx); err == nil {
			secret = guard.Secret
		}
	}
	found, _ := procs.New(ledgerOwner(l)...).Runs(id, secret)
	if len(found) == 0 {
		return nil
	}
	res, err := l.Purge(ctx, ledger.PurgeRequest{Selector: sel, DryRun: true})
	if err != nil {
		return err
	}
	selected := make(map[string]bool, len(res.Keys))
	for _, k := range res.Keys {
		selected[k] = true
	}
	var named []string
	for _, p := range found {
		if selected[p.Run.Key] {
			named = append(named, fmt.Sprintf("%s (pid %d)", p.Run.Key, p.PID))
		}
	}
	if len(named) == 0 {
		return nil
	}
	more := ""
	if len(named) > 5 {
		named, more = named[:5], fmt.Sprintf(" and %d more", len(named)-5)
	}
	return &exitError{code: exitcode.TempFail,
		msg:  fmt.Sprintf("processes of runs of selected keys still run on this host: %s%s; nothing was removed", strings.Join(named, ", "), more),
		hint: "let them end (or stop them) and purge again; --force removes the records anyway, and the keys' next runs will not look for them"}
}
