// Package handoff hands an invocation that only the companion executable
// (Name, installed beside idem) can serve to it while idem starts, before
// the packages that a run on a ledger file needs (SQLite's, cobra) are
// initialised: a run on a PostgreSQL ledger then pays for idem's start-up
// only up to here. Go runs no code of a program before the
// initialisation of every package that program imports, so this is done
// in an init function of a package that imports almost nothing (Go
// initialises packages in the order of their import paths where their
// imports allow, and this one's come before SQLite's and cobra's).
//
// Only idem's main package imports it: in idem-net it would hand every
// invocation to itself.
package handoff

import (
	"os"
	"path/filepath"
	"syscall"

	"github.com/idemhq/idem/internal/cmdline"
	"github.com/idemhq/idem/internal/companion"
)

// Name is the companion's file name, in idem's own directory.
const Name = "idem-net"

func init() {
	if !cmdline.ForCompanion(os.Args[1:], os.Getenv) {
		return
	}
	self, err := os.Executable()
	if err != nil {
		return
	}
	path := filepath.Join(filepath.Dir(self), Name)
	if companion.Check(path, self) != nil {
		return // idem's command says what is wrong
	}
	// The same pid, arguments, environment and descriptors, and the
	// signals idem's parent set to be ignored (nohup): no handler is
	// installed yet. Exec returns only when the companion cannot run;
	// idem then starts as usual, hands over from its command (cmd), and
	// says what is missing if that fails too.
	_ = syscall.Exec(path, os.Args, os.Environ())
}
