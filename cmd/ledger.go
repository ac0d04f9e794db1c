package cmd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/postgres"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

// ledgerPath resolves where the ledger lives: --ledger, then IDEM_LEDGER,
// then $XDG_STATE_HOME/idem/ledger.db, then ~/.local/state/idem/ledger.db.
func (a *app) ledgerPath() (string, error) {
	if a.ledgerFlag != "" {
		return a.ledgerFlag, nil
	}
	if p := a.getenv("IDEM_LEDGER"); p != "" {
		return p, nil
	}
	if d := a.getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "idem", "ledger.db"), nil
	}
	home := a.getenv("HOME")
	if home == "" {
		return "", usagef("set HOME, or name the ledger with --ledger or IDEM_LEDGER", "cannot find the default ledger: HOME is not set")
	}
	return filepath.Join(home, ".local", "state", "idem", "ledger.db"), nil
}

// runLockPath is the run lock file for l (see procs.Lock): beside a SQLite
// ledger; for a shared ledger, in this host's state directory, named by the
// ledger's identity (it covers this host only). "": no lock.
func (a *app) runLockPath(l ledger.Ledger) string {
	if _, ok := l.(*sqlite.Ledger); ok {
		return l.Describe() + ".runlock"
	}
	id := ledger.Identity(l)
	if id == "" {
		return ""
	}
	dir := ""
	if d := a.getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		dir = filepath.Join(d, "idem")
	} else if home := a.getenv("HOME"); home != "" {
		dir = filepath.Join(home, ".local", "state", "idem")
	} else {
		return ""
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ""
	}
	return filepath.Join(dir, "runs-"+id+".lock")
}

// openLedger opens the ledger; only commands that need it call this.
func (a *app) openLedger(ctx context.Context) (ledger.Ledger, error) {
	path, err := a.ledgerPath()
	if err != nil {
		return nil, err
	}
	if postgres.IsDSN(path) {
		return postgres.Open(ctx, path)
	}
	if scheme, _, ok := strings.Cut(path, "://"); ok && !strings.ContainsRune(scheme, '/') {
		return nil, usagef("name a file, or a PostgreSQL database as postgres://USER@HOST:PORT/DATABASE",
			"unsupported ledger URL scheme %q", scheme)
	}
	l, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	for _, f := range l.Tightened {
		a.ui.warnf("%s: the ledger holds command output, so others may not read it", f)
	}
	return l, nil
}

// noLedgerError says a SQLite ledger does not exist (yet): commands treat
// it as empty, and create nothing.
type noLedgerError struct{ path string }

func (e *noLedgerError) Error() string {
	return fmt.Sprintf("no ledger at %s: nothing was ever recorded there", e.path)
}

// openExistingLedger opens the ledger for commands that only read or
// remove records: a SQLite ledger that does not exist yet is an error, not
// an empty ledger created at a mistyped path. Its error is then a
// *noLedgerError.
func (a *app) openExistingLedger(ctx context.Context) (ledger.Ledger, error) {
	path, err := a.ledgerPath()
	if err != nil {
		return nil, err
	}
	if !postgres.IsDSN(path) {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			abs, _ := filepath.Abs(path)
			return nil, &noLedgerError{path: abs}
		}
	}
	return a.openLedger(ctx)
}
