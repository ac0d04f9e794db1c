package cmd

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/ledger"
)

// checker is a ledger that can check its own pages (SQLite).
type checker interface {
	Check(ctx context.Context) (*ledger.CheckResult, error)
}

func newCheckCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "check",
		Short: "Check the ledger for damage",
		Long: `Check every page of a SQLite ledger with SQLite's integrity check, while
runs go on (it only reads), and say what to do when it is damaged. It
reads the whole file: seconds for hundreds of megabytes.

Every run already refuses a ledger whose shared pages are damaged (74,
nothing run, nothing written); damage to another key's pages shows only
when something reads them: this check, or a run, inspect or purge of that
key. Run it after a crash of the host or disk, before a backup you mean
to keep, and when idem says the ledger is corrupt. Each problem found is
printed on its own line.

For a PostgreSQL ledger it checks that this idem can use the schema and
that the role it connects as has every right a run needs, and prints
the GRANT of each it lacks; the database's pages are the server's to
check (data checksums, pg_amcheck).`,
		Example: `  idem check
  idem check --ledger /var/lib/idem/ledger.db`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runCheck(c.Context(), a)
		},
	}
	helpSection(a, c, exitSection(
		exitLine{exitcode.OK, "no damage found"},
		exitLine{exitcode.Usage, "bad arguments"},
		exitLine{exitcode.IOErr, "the ledger is damaged, missing, or could not be opened or read; the role lacks a right a run needs"},
	))
	return c
}

func runCheck(ctx context.Context, a *app) error {
	l, err := a.openExistingLedger(ctx, true)
	var nl *noLedgerError
	if errors.As(err, &nl) {
		// Nothing to check is no clean bill of health: most likely a
		// mistyped path, or another user's ledger location.
		return nl.refusal("check", "")
	}
	if err != nil {
		return err
	}
	defer l.Close()
	w := newFlusher(a.stdout, "the check's result")
	ck, ok := l.(checker)
	if !ok {
		if g, ok := l.(granted); ok {
			role, missing, err := g.MissingGrants(ctx)
			if err != nil {
				return err
			}
			if len(missing) > 0 {
				// The grants to give it, one a line, as SQL.
				for _, m := range missing {
					fmt.Fprintln(w, escapeControls(m, false))
				}
				return w.done(&ledger.StoreError{Op: "check", Path: l.Describe(),
					Err:  fmt.Errorf("role %s lacks %d of the rights a run needs (above): some commands fail with \"permission denied\"", escapeControls(role, false), len(missing)),
					Hint: "have the ledger's owner run 'idem schema --apply --grant ROLE', or run the GRANTs above as the owner"})
			}
		}
		fmt.Fprintf(w, "%s: schema usable by this idem; its pages are the database server's to check (data checksums, pg_amcheck)\n", l.Describe())
		return w.done(nil)
	}
	r, err := ck.Check(ctx)
	if r != nil {
		for _, p := range r.Problems {
			// One problem a line, whatever it names: SQLite's words name
			// the file's own tables and indexes, which a ledger another
			// user made may name with newlines and escapes.
			fmt.Fprintln(w, escapeControls(p, false))
		}
	}
	if err != nil {
		return w.done(err)
	}
	fmt.Fprintf(w, "%s: ok (%d pages checked)\n", l.Describe(), r.Pages)
	return w.done(nil)
}

// granted is a ledger whose role may lack the rights a run needs
// (PostgreSQL).
type granted interface {
	MissingGrants(ctx context.Context) (role string, missing []string, err error)
}
