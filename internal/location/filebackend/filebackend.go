// Package filebackend is the location.Backend of ledger files on this
// host (SQLite): every location that no other backend claims is a file's
// path.
package filebackend

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/sqlite"
	"github.com/idemhq/idem/internal/location"
)

// Backend is a ledger file on this host.
type Backend struct{}

var _ location.Backend = Backend{}

func (Backend) Claims(string) bool { return true }

// Check refuses a URL that names no ledger idem knows: it is no file's
// name a user means.
func (Backend) Check(path string) error {
	if scheme, _, ok := strings.Cut(path, "://"); ok && !strings.ContainsRune(scheme, '/') {
		return location.Usagef("name a file, or a PostgreSQL database as postgres://USER@HOST:PORT/DATABASE",
			"unsupported ledger URL scheme %q", scheme)
	}
	// postgres:db, postgresql:/db or postgres//db: a DSN with a typo, not
	// a file to start an empty ledger in, under which every key of a fleet
	// runs again on this host. It is not shown: a DSN may hold a password
	// (IDEM_LEDGER keeps it out of ps, not out of a log of this line).
	for _, typo := range []string{"postgres:", "postgresql:", "postgres//", "postgresql//"} {
		if len(path) >= len(typo) && strings.EqualFold(path[:len(typo)], typo) {
			return location.Usagef("write a PostgreSQL ledger as postgres://USER@HOST:PORT/DATABASE (a file whose name starts so, as ./"+path[:len(typo)]+"...)",
				"the ledger starts with %s but is no PostgreSQL URL (postgres://...) and no file idem would make", path[:len(typo)])
		}
	}
	return nil
}

func (Backend) Open(ctx context.Context, path string, o location.Options) (ledger.Ledger, error) {
	// Root uses another user's ledger only when asked to, each time: an
	// environment variable, so that it reaches every command that opens
	// the ledger, and sudo's env_reset keeps a login shell's out.
	other := o.Getenv != nil && o.Getenv(sqlite.OtherOwnerEnv) == "1"
	l, err := sqlite.OpenFile(ctx, path, sqlite.Options{Options: o.Options, OtherOwner: other})
	if err != nil {
		return nil, err
	}
	if o.Now != nil {
		l.Now = o.Now // this host stamps the records
	}
	for _, f := range l.Tightened {
		o.Warn(f + ": the ledger holds command output, so others may not read it")
	}
	return l, nil
}

// Describe is the file's absolute path; a URL that Check refuses is shown
// without its password.
func (Backend) Describe(path string) string {
	if u, err := url.Parse(path); err == nil && u.Scheme != "" && strings.Contains(path, "://") {
		if u.User != nil {
			u.User = url.User(u.User.Username())
		}
		q := u.Query()
		for name := range q {
			if strings.Contains(strings.ToLower(name), "password") {
				q.Del(name)
			}
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

func (Backend) WithoutPassword(path string) (string, bool, bool) { return path, false, true }

func (Backend) AuthFailed(error) bool { return false }

func (Backend) Shared() bool { return false }

// RunLockPath is beside the ledger file.
func (Backend) RunLockPath(l ledger.Ledger, _ func() string) string {
	return l.Describe() + ".runlock"
}

func (Backend) CheckBackup() error { return nil }
