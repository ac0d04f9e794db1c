package sqlite

import (
	"context"

	"golang.org/x/sys/unix"

	"github.com/idemhq/idem/internal/ledger"
)

// OpenMigrations opens the ledger at path with a list of migrations of the
// test's choosing.
func OpenMigrations(ctx context.Context, path string, opts ledger.Options, ms []ledger.Migration) (*Ledger, error) {
	return open(ctx, path, Options{Options: opts}, ms)
}

// Migrations returns a copy of this idem's migrations.
func Migrations() []ledger.Migration { return append([]ledger.Migration(nil), migrations...) }

// EncodeVersions is the PRAGMA user_version that stores v.
var EncodeVersions = encodeVersions

// TokenBlock is how many tokens one raise of the token mark covers.
const TokenBlock = tokenBlock

// BindWAL binds the -wal beside path to path, as an open does before
// anything is written to it: for tests that copy a ledger's files.
func BindWAL(path string) {
	unix.Removexattr(path+"-wal", walBindAttr)
	bindWAL(path)
}
