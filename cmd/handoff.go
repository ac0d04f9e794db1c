package cmd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/idemhq/idem/internal/companion"
	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/location"
)

// handOff runs this invocation in the companion c instead, in this
// process (execve): the same pid, arguments, environment and descriptors,
// and whatever signals idem's parent set to be ignored (nohup), since no
// handler has been installed yet. It is called before anything is read
// from stdin, written, or opened. It returns only when the companion could
// not be run: it is looked for in this executable's own directory, where
// every way of installing idem puts both.
func (a *app) handOff(c location.Companion) error {
	self, err := os.Executable()
	if err != nil {
		return &exitError{code: exitcode.IOErr, msg: fmt.Sprintf("%s needs %s, and idem cannot find its own executable to look for it beside: %v", c.Kind, c.Name, err)}
	}
	path := filepath.Join(filepath.Dir(self), c.Name)
	hint := fmt.Sprintf("install %s from the same idem release into %s (each release archive and package has both; from source: go install ./cmd/%s)", c.Name, filepath.Dir(self), c.Name)
	err = companion.Check(path, self)
	switch {
	case errors.Is(err, companion.ErrSelf):
		// Executing it would start this idem again, for ever.
		return &exitError{code: exitcode.IOErr, hint: hint,
			msg: fmt.Sprintf("%s needs %s, but %s is this idem (a copy or a link of it), not %s", c.Kind, c.Name, path, c.Name)}
	case err == nil:
		err = syscall.Exec(path, append([]string{a.argv0}, a.args...), a.environ)
	case !errors.Is(err, fs.ErrNotExist):
		return &exitError{code: exitcode.IOErr,
			hint: fmt.Sprintf("reinstall %s from the same idem release, owned by root or by idem's owner and writable by nobody else", c.Name),
			msg:  fmt.Sprintf("%s needs %s, and idem does not run %s: %v", c.Kind, c.Name, path, err)}
	}
	// Missing (never executed: a file that appears at the path after the
	// check, another user's in a directory others may write, would run
	// unchecked), or the exec failed.
	return &exitError{code: exitcode.IOErr, hint: hint,
		msg: fmt.Sprintf("%s needs %s beside %s: %v", c.Kind, c.Name, self, err)}
}
