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

// Registry is the backends idem links in, in the order they are asked.
type Registry struct {
	backends []Backend
}

// NewRegistry returns the registry of backends, asked in the order given:
// the first that claims a value keeps it, so the last may claim every
// value (a file's path).
func NewRegistry(backends ...Backend) *Registry {
	return &Registry{backends: backends}
}

// Lookup returns the Location of value: value and the first backend that
// claims it; ErrUnclaimed when none does. It does not check value (see
// Location.Check).
func (r *Registry) Lookup(value string) (Location, error) {
	for _, b := range r.backends {
		if b.Claims(value) {
			return Location{value: value, backend: b}, nil
		}
	}
	return Location{}, ErrUnclaimed
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
