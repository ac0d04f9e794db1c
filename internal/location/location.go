// Package location turns the value of --ledger or IDEM_LEDGER into the
// backend that keeps that ledger. cmd.Main builds a Registry of the
// backends it links in, explicitly and in order; whatever depends on the
// kind of ledger (how it is opened and named, its run lock, its password,
// its lease) is then asked of the Location, so that only the Registry
// tells the kinds apart. Nothing here opens anything or runs at start-up:
// finding the backend compares strings.
package location

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// Backend is one kind of ledger: how its locations are told and what idem
// needs to know of them. Its methods take the location's value as given.
type Backend interface {
	// Claims reports whether value names a ledger of this kind. It only
	// compares strings.
	Claims(value string) bool
	// Check returns why value, which this backend claims, names no ledger
	// it can open (an error for the user, with its hint), or nil.
	Check(value string) error
	// Open opens the ledger at value as o says.
	Open(ctx context.Context, value string, o Options) (ledger.Ledger, error)
	// Describe names the ledger at value for a report: without a
	// password, a file's path absolute.
	Describe(value string) string
	// WithoutPassword returns value without its password, for the
	// environment of the command idem runs: had reports that it had one,
	// and !ok that value could not be read, so what to take out is
	// unknown.
	WithoutPassword(value string) (clean string, had, ok bool)
	// AuthFailed reports whether err, from Open, is a server's refusal of
	// a login.
	AuthFailed(err error) bool
	// Shared reports whether such a ledger is shared by hosts (a server)
	// rather than a file on this host: its leases are longer.
	Shared() bool
	// RunLockPath is the run lock file of l, a ledger this backend opened;
	// stateDir returns this host's state directory, "" when there is none.
	// "": no run lock.
	RunLockPath(l ledger.Ledger, stateDir func() string) string
	// CheckBackup returns why 'idem backup' cannot copy such a ledger (an
	// error for the user, with its hint), or nil.
	CheckBackup() error
}

// Options says how Backend.Open opens a ledger.
type Options struct {
	ledger.Options
	// Now is this host's clock, for a ledger whose records this host
	// stamps (a file); a server's ledger keeps the server's clock. Nil:
	// the backend's own.
	Now func() time.Time
	// Getenv reads the environment for what the location does not say
	// (a PostgreSQL ledger's schema).
	Getenv func(string) string
	// Warn is told what the user should know of the ledger opened (the
	// permissions it tightened, a password file it ignored).
	Warn func(msg string)
}

// Registry is the backends idem links in, in the order they are asked,
// and the companions that keep the ledgers it does not link.
type Registry struct {
	backends   []Backend
	companions []Companion
}

// NewRegistry returns the registry of backends, asked in the order given:
// the first that claims a value keeps it, so the last may claim every
// value (a file's path).
func NewRegistry(backends ...Backend) *Registry {
	return &Registry{backends: backends}
}

// Companion is another executable of idem's, installed beside this one,
// that keeps ledgers this one does not link: idem, which links only
// SQLite so that a run on a file pays for nothing else, hands an
// invocation on a PostgreSQL database to idem-net whole.
type Companion struct {
	// Name is its file name, in this executable's directory.
	Name string
	// Claims reports whether value names a ledger it keeps. It only
	// compares strings.
	Claims func(value string) bool
	// Kind names those ledgers for a message ("a PostgreSQL ledger").
	Kind string
}

// WithCompanion returns r with c asked before its backends.
func (r *Registry) WithCompanion(c Companion) *Registry {
	r.companions = append(r.companions, c)
	return r
}

// Companion returns the first companion, which keeps what this
// executable does not link; ok is false when there is none.
func (r *Registry) Companion() (c Companion, ok bool) {
	if len(r.companions) == 0 {
		return Companion{}, false
	}
	return r.companions[0], true
}

// Lookup returns the Location of value: value and the first backend that
// claims it; *ElsewhereError when a companion claims it; ErrUnclaimed when
// none does. It does not check value (see Location.Check).
func (r *Registry) Lookup(value string) (Location, error) {
	for _, c := range r.companions {
		if c.Claims(value) {
			return Location{}, &ElsewhereError{Companion: c}
		}
	}
	for _, b := range r.backends {
		if b.Claims(value) {
			return Location{value: value, backend: b}, nil
		}
	}
	return Location{}, ErrUnclaimed
}

// Schemer is a backend whose ledgers have a schema that their owner
// applies ('idem schema').
type Schemer interface {
	Backend
	// SchemaName is the schema getenv names, checked, or the default.
	SchemaName(getenv func(string) string) (string, error)
	// SchemaSQL is the DDL of schema, with the grants of roles.
	SchemaSQL(schema string, roles []string) string
	// ApplySchema creates or migrates schema in the ledger at value, and
	// grants roles the runtime rights.
	ApplySchema(ctx context.Context, value, schema string, roles []string) (*Applied, error)
}

// Applied is what Schemer.ApplySchema did.
type Applied struct {
	Schema        string
	Before, After int // schema versions; Before 0: created
	// Rehomed: the ledger had been restored from a backup, and
	// its fencing tokens were moved past any handed out since.
	Rehomed bool
}

// Schemer returns the first backend that is a Schemer; none linked: the
// *ElsewhereError of the first companion, which keeps what this
// executable does not (nil, nil: neither).
func (r *Registry) Schemer() (Schemer, error) {
	for _, b := range r.backends {
		if s, ok := b.(Schemer); ok {
			return s, nil
		}
	}
	if len(r.companions) > 0 {
		return nil, &ElsewhereError{Companion: r.companions[0]}
	}
	return nil, nil
}

// ElsewhereError is Lookup's error for a location that a companion
// keeps: the invocation is the companion's to run.
type ElsewhereError struct {
	Companion Companion
}

func (e *ElsewhereError) Error() string {
	return fmt.Sprintf("%s is kept by %s, not by this executable", e.Companion.Kind, e.Companion.Name)
}

// UsageError is a backend's error for a location that names no ledger it
// can open because of how it is written: the user's to fix, as Hint says.
type UsageError struct {
	Err  error
	Hint string
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a *UsageError with hint and the message format makes.
func Usagef(hint, format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...), Hint: hint}
}

// ErrUnclaimed is Lookup's error for a value that no backend claims.
var ErrUnclaimed = errors.New("no ledger backend claims this location")

// Location is a ledger's location and the backend that keeps it; its
// methods are the backend's, for this location.
type Location struct {
	value   string
	backend Backend
}

// Value is the location as given.
func (l Location) Value() string { return l.value }

// Backend is the backend that keeps the ledger.
func (l Location) Backend() Backend { return l.backend }

// Open opens the ledger as o says.
func (l Location) Open(ctx context.Context, o Options) (ledger.Ledger, error) {
	return l.backend.Open(ctx, l.value, o)
}

// Check returns why the location names no ledger its backend can open
// (see Backend.Check), or nil.
func (l Location) Check() error { return l.backend.Check(l.value) }

// Describe names the ledger for a report (see Backend.Describe).
func (l Location) Describe() string { return l.backend.Describe(l.value) }

// Shared reports whether the ledger is shared by hosts (see
// Backend.Shared).
func (l Location) Shared() bool { return l.backend.Shared() }

// HasPassword reports whether the location carries a password.
func (l Location) HasPassword() bool {
	_, had, _ := l.backend.WithoutPassword(l.value)
	return had
}
