package cmd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/postgres"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

// ledgerLocation is where the ledger lives and how idem found it.
type ledgerLocation struct {
	path string
	// named: the user gave the path (--ledger, IDEM_LEDGER), so its
	// directory must exist; a default location's directory is created.
	named bool
	// service: the path is systemd's $STATE_DIRECTORY, which a login
	// shell does not have.
	service bool
}

// ledgerPath resolves where the ledger lives: --ledger, then IDEM_LEDGER,
// then $STATE_DIRECTORY/ledger.db (its first entry: a systemd service's
// StateDirectory=), then $XDG_STATE_HOME/idem/ledger.db, then
// ~/.local/state/idem/ledger.db, with the home directory from HOME or,
// without it (a daemon's environment), from the password database.
func (a *app) ledgerPath() (ledgerLocation, error) {
	if a.ledgerFlag != "" {
		return ledgerLocation{path: a.ledgerFlag, named: true}, nil
	}
	if p := a.getenv("IDEM_LEDGER"); p != "" {
		return ledgerLocation{path: p, named: true}, nil
	}
	dir, service, err := a.stateDir()
	if err != nil {
		return ledgerLocation{}, err
	}
	return ledgerLocation{path: filepath.Join(dir, "ledger.db"), service: service}, nil
}

// stateDir is idem's directory for this user's state on this host: the
// first entry of $STATE_DIRECTORY (a systemd service's StateDirectory=,
// then service is true), else $XDG_STATE_HOME/idem, else
// ~/.local/state/idem, with the home directory from HOME or, without it (a
// daemon's environment), from the password database.
func (a *app) stateDir() (dir string, service bool, err error) {
	if d, _, _ := strings.Cut(a.getenv("STATE_DIRECTORY"), ":"); filepath.IsAbs(d) {
		return d, true, nil
	}
	if d := a.getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "idem"), false, nil
	}
	home := a.getenv("HOME")
	if home == "" {
		// What a shell's ~ gives without HOME. A static build (no cgo)
		// reads /etc/passwd only, not LDAP or SSSD: hence the hint.
		if u, err := user.Current(); err == nil && filepath.IsAbs(u.HomeDir) {
			home = u.HomeDir
		}
	}
	if home == "" {
		return "", false, &exitError{code: exitcode.IOErr,
			msg:  fmt.Sprintf("cannot find the default ledger: HOME is not set and the password database has no home directory for uid %d", os.Getuid()),
			hint: "set IDEM_LEDGER to the ledger's path (or HOME)"}
	}
	return filepath.Join(home, ".local", "state", "idem"), false, nil
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
	dir, _, err := a.stateDir()
	if err != nil || os.MkdirAll(dir, 0o700) != nil {
		return ""
	}
	return filepath.Join(dir, "runs-"+id+".lock")
}

// openLedger opens the ledger to read and write, creating it when missing;
// only commands that need it call this.
func (a *app) openLedger(ctx context.Context) (ledger.Ledger, error) {
	loc, err := a.ledgerPath()
	if err != nil {
		return nil, err
	}
	if err := checkScheme(loc.path); err != nil {
		return nil, err
	}
	if postgres.IsDSN(loc.path) {
		l, err := a.openPostgres(ctx, loc.path, ledger.Options{})
		if err != nil {
			return nil, a.loginError(err)
		}
		return l, nil
	}
	l, err := sqlite.OpenWith(ctx, loc.path, ledger.Options{NoMkdir: loc.named})
	if err != nil {
		return nil, err
	}
	for _, f := range l.Tightened {
		a.ui.warnf("%s: the ledger holds command output, so others may not read it", f)
	}
	return l, nil
}

// schemaVar names the PostgreSQL schema of the ledger, for a DBA who
// keeps more than one ledger in a database (a staging fleet beside
// production) or has a naming rule. It is not a DSN parameter: pgx sends
// those it does not know to the server as start-up parameters, which
// poolers refuse.
const schemaVar = "IDEM_LEDGER_SCHEMA"

// ledgerSchema is the PostgreSQL schema the ledger is in: IDEM_LEDGER_SCHEMA,
// else postgres.Schema.
func (a *app) ledgerSchema() (string, error) {
	s := a.getenv(schemaVar)
	if s == "" {
		return postgres.Schema, nil
	}
	if err := postgres.CheckSchemaName(s); err != nil {
		return "", usagef("name a schema with lower-case letters, digits and _, not starting with a digit or pg_",
			"%s: %w", schemaVar, err)
	}
	return s, nil
}

// openPostgres opens the PostgreSQL ledger at dsn, in the schema
// IDEM_LEDGER_SCHEMA names, and passes its warnings on.
func (a *app) openPostgres(ctx context.Context, dsn string, opts ledger.Options) (*postgres.Ledger, error) {
	schema, err := a.ledgerSchema()
	if err != nil {
		return nil, err
	}
	opts.Schema = schema
	l, err := postgres.OpenWith(ctx, dsn, opts)
	if err != nil {
		return nil, err
	}
	for _, w := range l.Warnings() {
		a.ui.warnf("%s", w)
	}
	return l, nil
}

// checkScheme refuses a URL that names no ledger idem knows, and a
// connection string idem cannot use: libpq would take it for one, so it
// never names a file.
func checkScheme(path string) error {
	if postgres.IsDSN(path) {
		if err := postgres.CheckDSN(path); err != nil {
			return usagef("write the ledger as host=HOST port=PORT dbname=DATABASE user=USER (libpq's keywords) or postgres://USER@HOST:PORT/DATABASE; a file whose name starts with WORD= as ./WORD=...", "%v", err)
		}
		return nil
	}
	if scheme, _, ok := strings.Cut(path, "://"); ok && !strings.ContainsRune(scheme, '/') {
		return usagef("name a file, or a PostgreSQL database as postgres://USER@HOST:PORT/DATABASE",
			"unsupported ledger URL scheme %q", scheme)
	}
	return nil
}

// noLedgerError says the ledger does not exist (yet): commands treat it
// as empty, and create nothing.
type noLedgerError struct {
	path  string
	named bool // the user named the path (--ledger, IDEM_LEDGER)
}

// hint says where else records may be: a default location is not where
// a systemd service keeps its ledger.
func (e *noLedgerError) hint() string {
	if e.named {
		return ""
	}
	return serviceHint
}

func (e *noLedgerError) Error() string {
	return fmt.Sprintf("no ledger at %s: nothing was ever recorded there", e.path)
}

// serviceHint is said where a ledger of a systemd service and one of a
// login shell may be taken for each other.
const serviceHint = "a systemd service with StateDirectory= keeps its ledger in $STATE_DIRECTORY/ledger.db (/var/lib/NAME/ledger.db), which a login shell does not see: inspect it with --ledger"

// openExistingLedger opens an existing ledger for commands that only
// read or remove records: a ledger that does not exist yet (a missing or
// empty SQLite file, a database without the schema) is a *noLedgerError,
// never an empty ledger created at a mistyped path. With readOnly the
// ledger is opened for reading only, so another user's ledger that may be
// read can be inspected.
func (a *app) openExistingLedger(ctx context.Context, readOnly bool) (ledger.Ledger, error) {
	loc, err := a.ledgerPath()
	if err != nil {
		return nil, err
	}
	if err := checkScheme(loc.path); err != nil {
		return nil, err
	}
	noLedger := func() error {
		p := loc.path
		if !postgres.IsDSN(p) {
			if abs, err := filepath.Abs(p); err == nil {
				p = abs
			}
		}
		return &noLedgerError{path: p, named: loc.named}
	}
	if !readOnly && !postgres.IsDSN(loc.path) {
		// Writing would initialise an empty file: look read-only first.
		if fi, err := os.Stat(loc.path); errors.Is(err, fs.ErrNotExist) || err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
			return nil, noLedger()
		}
		return a.openLedger(ctx)
	}
	var l ledger.Ledger
	if postgres.IsDSN(loc.path) {
		// A database without the schema stays without it.
		l, err = a.openPostgres(ctx, loc.path, ledger.Options{ReadOnly: readOnly, Existing: true})
	} else {
		l, err = sqlite.OpenWith(ctx, loc.path, ledger.Options{ReadOnly: true})
	}
	err = a.loginError(err)
	var se *ledger.StoreError
	if errors.Is(err, ledger.ErrNoLedger) && errors.As(err, &se) {
		return nil, &noLedgerError{path: se.Path, named: loc.named} // a DSN without its password
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}

// childEnviron is env for the command idem runs: IDEM_LEDGER without its
// password, since the command may print its environment (into the
// ledger's stored output) or hand it on. A nested idem reaches the same
// ledger with the password from PGPASSWORD or a PGPASSFILE, which, as every
// PG* variable, pass through untouched: they may be the command's own.
func childEnviron(env []string) []string {
	for i, kv := range env {
		v, ok := strings.CutPrefix(kv, "IDEM_LEDGER=")
		if !ok || !postgres.IsDSN(v) {
			continue
		}
		clean, had, ok := postgres.WithoutPassword(v)
		if !had && ok {
			continue
		}
		if !ok {
			// Nothing can be taken out reliably: hand on a DSN that fails
			// loudly, rather than none (a nested idem would use a local
			// file).
			clean = "postgres://(unparsable)"
		}
		env = slices.Clone(env)
		env[i] = "IDEM_LEDGER=" + clean
	}
	return env
}

// loginError says why a login to a PostgreSQL ledger failed inside a
// command idem runs, when that is because the command got IDEM_LEDGER
// without its password (childEnviron) and has no other.
func (a *app) loginError(err error) error {
	var se *ledger.StoreError
	if _, nested := lookupEnv(a.environ, "IDEM_KEY"); !nested || a.ledgerFlag != "" || a.getenv("PGPASSWORD") != "" ||
		!postgres.AuthFailed(err) || !errors.As(err, &se) {
		return err
	}
	if _, had, _ := postgres.WithoutPassword(a.getenv("IDEM_LEDGER")); had {
		return err
	}
	c := *se
	c.Hint = "idem gives the command it runs IDEM_LEDGER without its password: give the password in PGPASSWORD or a PGPASSFILE instead"
	return &c
}
