package cmd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strings"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/location"
)

// ledgerLocation is where the ledger lives, the backend that keeps it,
// and how idem found it.
type ledgerLocation struct {
	location.Location
	// named: the user gave the path (--ledger, IDEM_LEDGER), so its
	// directory must exist; a default location's directory is created.
	named bool
	// service: the default location is a systemd service's own
	// ($STATE_DIRECTORY).
	service bool
}

// ledgerPath resolves where the ledger lives: --ledger, then IDEM_LEDGER,
// then $STATE_DIRECTORY/ledger.db (its first entry: a systemd service's
// StateDirectory=), then $XDG_STATE_HOME/idem/ledger.db, then
// ~/.local/state/idem/ledger.db, with the home directory from HOME or,
// without it (a daemon's environment), from the password database. It
// does not check the location (see ledger). A location that a companion
// keeps (a PostgreSQL ledger, for an idem that links only SQLite) hands
// the whole invocation to that executable: ledgerPath returns only if
// that fails.
func (a *app) ledgerPath() (ledgerLocation, error) {
	path, named := a.ledgerFlag, true
	if path == "" {
		path = a.getenv("IDEM_LEDGER")
	}
	if path == "" {
		dir, err := a.stateDir()
		if err != nil {
			return ledgerLocation{}, err
		}
		path, named = filepath.Join(dir, "ledger.db"), false
	}
	service := !named && a.serviceState() != ""
	loc, err := a.backends.Lookup(path)
	var elsewhere *location.ElsewhereError
	if errors.As(err, &elsewhere) {
		return ledgerLocation{}, a.handOff(elsewhere.Companion)
	}
	if err != nil {
		return ledgerLocation{}, err
	}
	return ledgerLocation{Location: loc, named: named, service: service}, nil
}

// describe names the ledger at loc for a report or a metrics label: its
// backend's description, and its schema when that is not the default,
// so that ledgers in two schemas of one database are told apart, as
// inspect tells them apart.
func (a *app) describe(loc ledgerLocation) string {
	d := loc.Describe()
	if s, ok := loc.Backend().(location.Schemer); ok {
		name, err := s.SchemaName(a.getenv)
		def, _ := s.SchemaName(func(string) string { return "" })
		if err == nil && name != def {
			d += " (schema " + name + ")"
		}
	}
	return d
}

// ledger is ledgerPath, checked: a location that names no ledger its
// backend can open is a usage error.
func (a *app) ledger() (ledgerLocation, error) {
	loc, err := a.ledgerPath()
	if err != nil {
		return ledgerLocation{}, err
	}
	if err := loc.Check(); err != nil {
		return ledgerLocation{}, err
	}
	return loc, nil
}

// stateDir is idem's directory for this user's state on this host: the
// first entry of $STATE_DIRECTORY (a systemd service's StateDirectory=),
// else $XDG_STATE_HOME/idem, else ~/.local/state/idem, with the home
// directory from HOME or, without it (a daemon's environment), from the
// password database.
func (a *app) stateDir() (string, error) {
	dir, _, err := a.stateDirHome()
	return dir, err
}

// serviceState is the first entry of $STATE_DIRECTORY (a systemd
// service's StateDirectory=) when it is an absolute path, else "".
func (a *app) serviceState() string {
	if d, _, _ := strings.Cut(a.getenv("STATE_DIRECTORY"), ":"); filepath.IsAbs(d) {
		return d
	}
	return ""
}

// stateDirHome is stateDir, and the HOME it lies under when that variable
// gave it ("" when the directory is a service's, XDG's, or under the
// password database's home).
func (a *app) stateDirHome() (dir, home string, err error) {
	if d := a.serviceState(); d != "" {
		return d, "", nil
	}
	if d := a.getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "idem"), "", nil
	}
	home = a.getenv("HOME")
	envHome := home
	if home == "" {
		// What a shell's ~ gives without HOME. A static build (no cgo)
		// reads /etc/passwd only, not LDAP or SSSD: hence the hint.
		if u, err := user.Current(); err == nil && filepath.IsAbs(u.HomeDir) {
			home = u.HomeDir
		}
	}
	if home == "" {
		return "", "", &exitError{code: exitcode.IOErr,
			msg:  fmt.Sprintf("cannot find the default ledger: HOME is not set and the password database has no home directory for uid %d", os.Getuid()),
			hint: "set IDEM_LEDGER to the ledger's path (or HOME)"}
	}
	return filepath.Join(home, ".local", "state", "idem"), envHome, nil
}

// checkHome refuses to make the default ledger under a HOME that does not
// exist (a typo, a user without one): its directory is made under the
// home, never the home itself.
func (a *app) checkHome() error {
	_, home, err := a.stateDirHome()
	if err != nil || home == "" {
		return nil // another directory, or none: the ledger's location says so
	}
	if fi, err := os.Stat(home); err != nil || !fi.IsDir() {
		return &exitError{code: exitcode.IOErr,
			msg:  fmt.Sprintf("cannot make the default ledger: HOME %s is not a directory", home),
			hint: "set IDEM_LEDGER to a file in a directory this user owns (a system user's home is often missing), or HOME to a directory that exists"}
	}
	return nil
}

// runLockPath is the run lock file for l (see procs.Lock), as its backend
// places it: beside a ledger file; for a shared ledger, in this host's
// state directory. "": no lock.
func (a *app) runLockPath(loc ledgerLocation, l ledger.Ledger) string {
	return loc.Backend().RunLockPath(l, func() string {
		dir, err := a.stateDir()
		if err != nil || os.MkdirAll(dir, 0o700) != nil {
			return ""
		}
		return dir
	})
}

// open opens the ledger at loc as opts says, with the backend's warnings
// shown and a login refused inside a run explained (loginError).
func (a *app) open(ctx context.Context, loc ledgerLocation, opts ledger.Options) (ledger.Ledger, error) {
	l, err := loc.Open(ctx, location.Options{Options: opts, Now: a.now, Getenv: a.getenv,
		Warn: func(msg string) { a.ui.warnf("%s", msg) }})
	if err != nil {
		homeless(loc, err)
		return nil, a.loginError(loc, err)
	}
	return l, nil
}

// homeless gives the fix to a user that may not create the default
// ledger's directory: a system user (nobody, www-data) whose home is
// missing or not its own, for whom permissions are not the thing to change.
func homeless(loc ledgerLocation, err error) {
	se := (*ledger.StoreError)(nil)
	if !loc.named && errors.As(err, &se) && se.Op == "create directory" && errors.Is(se.Err, fs.ErrPermission) {
		se.Hint = "this user may not create the default ledger in its home directory (a system user's is often missing or not its own): set IDEM_LEDGER to a file in a directory it owns"
	}
}

// openLedger opens the ledger to read and write, creating it when missing;
// only commands that need it call this.
func (a *app) openLedger(ctx context.Context) (ledger.Ledger, ledgerLocation, error) {
	loc, err := a.ledger()
	if err != nil {
		return nil, loc, err
	}
	if !loc.named {
		if err := a.checkHome(); err != nil {
			return nil, loc, err
		}
	}
	l, err := a.open(ctx, loc, ledger.Options{NoMkdir: loc.named})
	return l, loc, err
}

// noLedgerError says the ledger does not exist (yet): commands treat it
// as empty, and create nothing.
type noLedgerError struct {
	path    string
	named   bool   // the user named the path (--ledger, IDEM_LEDGER)
	service bool   // the path is a systemd service's state directory's
	store   string // the backend's hint: how its ledgers come to be
}

// hint says where else records may be: a login shell's default location
// is not where a systemd service keeps its ledger.
func (e *noLedgerError) hint() string {
	if e.named || e.service {
		return ""
	}
	return serviceHint
}

// refusal is the error of a command that needs the ledger to exist
// (check, backup), with what to do.
func (e *noLedgerError) refusal(op, what string) error {
	hint := e.hint()
	if hint == "" {
		hint = e.store
	}
	return &ledger.StoreError{Op: op, Path: e.path, Err: errors.New("no ledger there: nothing was ever recorded" + what), Hint: hint}
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
	loc, err := a.ledger()
	if err != nil {
		return nil, err
	}
	l, err := a.open(ctx, loc, ledger.Options{ReadOnly: readOnly, Existing: true, NoMkdir: loc.named})
	var se *ledger.StoreError
	if errors.Is(err, ledger.ErrNoLedger) && errors.As(err, &se) {
		return nil, &noLedgerError{path: se.Path, named: loc.named, service: loc.service, store: se.Hint} // a DSN without its password
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}

// childEnviron is env for the command idem runs under the ledger at loc:
// IDEM_LEDGER names that ledger however idem was told of it (--ledger,
// IDEM_LEDGER, the default location), so that a nested idem run records
// in the same ledger rather than this host's own file; a file as an
// absolute path, since the command may change directory. A DSN goes
// without its password, since the command may print its environment
// (into the ledger's stored output) or hand it on. A nested idem reaches
// the same ledger with the password from PGPASSWORD or a PGPASSFILE,
// which, as every PG* variable, pass through untouched: they may be the
// command's own. IDEM_PING_URL does not pass: it is a secret, and the
// pings are this run's (a nested idem run pings only if told to).
func (a *app) childEnviron(env []string, loc location.Location) []string {
	v := loc.Value()
	if !loc.Shared() && !filepath.IsAbs(v) {
		if abs, err := filepath.Abs(v); err == nil {
			v = abs
		}
	}
	clean, _, ok := loc.Backend().WithoutPassword(v)
	if !ok {
		// Nothing can be taken out reliably: hand on a DSN that fails
		// loudly, rather than none (a nested idem would use a local
		// file).
		clean = "postgres://(unparsable)"
	}
	out, set := make([]string, 0, len(env)+1), false
	for _, kv := range env {
		if strings.HasPrefix(kv, "IDEM_PING_URL=") {
			continue // a secret (anyone with it can ping), and this run's, not the command's
		}
		if !strings.HasPrefix(kv, "IDEM_LEDGER=") {
			out = append(out, kv)
		} else if !set {
			out, set = append(out, "IDEM_LEDGER="+clean), true
		}
	}
	if !set {
		out = append(out, "IDEM_LEDGER="+clean)
	}
	return out
}

// loginError says why a login to the ledger at loc failed inside a
// command idem runs, when that is because the command got IDEM_LEDGER
// without its password (childEnviron) and has no other.
func (a *app) loginError(loc ledgerLocation, err error) error {
	var se *ledger.StoreError
	if _, nested := lookupEnv(a.environ, "IDEM_KEY"); !nested || a.ledgerFlag != "" || a.getenv("PGPASSWORD") != "" ||
		!loc.Backend().AuthFailed(err) || !errors.As(err, &se) {
		return err
	}
	if loc.HasPassword() {
		return err
	}
	c := *se
	c.Hint = "idem gives the command it runs IDEM_LEDGER without its password: give the password in PGPASSWORD or a PGPASSFILE instead"
	return &c
}
