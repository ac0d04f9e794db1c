package cmd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/shquote"
)

// backuper is a ledger that can copy itself (SQLite; see
// location.Backend.CheckBackup).
type backuper interface {
	Backup(ctx context.Context, dest string) error
}

func newBackupCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "backup DEST",
		Short: "Write a consistent copy of the ledger to a new file",
		Long: `Write a consistent copy of a SQLite ledger to DEST, a new file (mode 0600),
while runs go on: the copy is one snapshot of the ledger, compacted, with
no -wal file to go with it. Never copy a ledger's files with cp while idem
may run: the .db alone lacks the records still in its -wal, and a -wal
beside an older .db corrupts it.

To restore: stop every idem that uses the ledger, remove the ledger's
-wal and -shm files, then put the backup in place of the .db (cp BACKUP
LEDGER, or mv). Runs after the backup was taken are not in it: their keys
run again.

A PostgreSQL ledger is backed up with the database's own tools (pg_dump of
the schema idem, or the server's backups); idem backup refuses it (64).`,
		Example: `  idem backup ~/backups/ledger-$(date +%F).db

  # restore (no idem running)
  rm -f ~/.local/state/idem/ledger.db-wal ~/.local/state/idem/ledger.db-shm
  cp ~/backups/ledger-2026-12-01.db ~/.local/state/idem/ledger.db`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return runBackup(c.Context(), a, args[0])
		},
	}
	helpSection(a, c, exitSection(
		exitLine{exitcode.OK, "the copy was written"},
		exitLine{exitcode.Usage, "bad arguments, or a PostgreSQL ledger (use its own tools)"},
		exitLine{exitcode.IOErr, "the ledger is missing or could not be read, or DEST exists or could not be written"},
	))
	return c
}

func runBackup(ctx context.Context, a *app, dest string) error {
	if dest == "" {
		// Most likely "$UNSET": the working directory is no file to write.
		return usagef("name the file to write, e.g. idem backup ~/backups/ledger-$(date +%F).db", "DEST is empty")
	}
	loc, err := a.ledgerPath()
	if err != nil {
		return err
	}
	if err := loc.Backend().CheckBackup(); err != nil {
		return err
	}
	// Not read-only: a read-only open without a -wal is immutable, which a
	// backup taken while runs write must not be.
	l, err := a.openExistingLedger(ctx, false)
	var nl *noLedgerError
	if errors.As(err, &nl) {
		// An empty copy would restore as a ledger with nothing in it: most
		// likely the path is mistyped, or the ledger is another user's.
		return nl.refusal("backup", "; nothing was written")
	}
	if err != nil {
		return err
	}
	defer l.Close()
	b, ok := l.(backuper)
	if !ok {
		// A backend that passes CheckBackup copies itself: a bug.
		return fmt.Errorf("the ledger %s has no backup", l.Describe())
	}
	if err := b.Backup(ctx, dest); err != nil {
		return backupError(dest, err)
	}
	a.ui.noticef("backed up %s to %s", l.Describe(), dest)
	return nil
}

// backupError names the backup, not the ledger, when what failed is DEST
// (the backend reports every failure as its ledger's), and says what to
// do about a directory that is not there.
func backupError(dest string, err error) error {
	se := (*ledger.StoreError)(nil)
	abs, absErr := filepath.Abs(dest)
	if !errors.As(err, &se) || absErr != nil || se.Path != abs {
		return err
	}
	hint := se.Hint
	if _, err := os.Lstat(filepath.Dir(abs)); errors.Is(se.Err, fs.ErrNotExist) && errors.Is(err, fs.ErrNotExist) {
		hint = fmt.Sprintf("create its directory first (mkdir -p %s), or name a file in one that exists", shquote.Word(filepath.Dir(abs)))
	}
	return &exitError{code: exitcode.IOErr, msg: fmt.Sprintf("backup %s: %v; the ledger is unchanged", abs, se.Err), hint: hint}
}
