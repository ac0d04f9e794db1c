package cmd

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/ledger"
)

// Exit codes of idem itself (sysexits and timeout(1) conventions).
const (
	ExitOK         = 0
	ExitNotFound   = 1 // inspect of an unknown key
	ExitUsage      = 64
	ExitData       = 65
	ExitIO         = 74
	ExitTempFail   = 75
	ExitTimeout    = 124
	ExitCannotExec = 126
	ExitNoCommand  = 127
)

// usageError marks bad invocations (exit 64).
type usageError struct {
	err  error
	hint string
}

func (e *usageError) Error() string { return e.err.Error() }

func (e *usageError) Unwrap() error { return e.err }

func usagef(hint, format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...), hint: hint}
}

// exitError carries an exit code, a message and a hint chosen by a command.
type exitError struct {
	code int
	msg  string
	hint string
}

func (e *exitError) Error() string { return e.msg }

// fail prints err as one "idem: error:" line and at most one hint line, and
// returns the exit code it maps to.
func (a *app) fail(err error) int {
	u := a.ui
	if u == nil {
		u = newUI(a)
	}
	code, msg, hint := explain(err)
	u.errorLine(msg, hint)
	return code
}

// explain maps err to idem's exit code, message and hint (--report uses
// it too, so the report and the exit status agree).
func explain(err error) (code int, msg, hint string) {
	var (
		ue *usageError
		ee *exitError
		se *ledger.StoreError
	)
	msg = err.Error()
	switch {
	case errors.As(err, &ee):
		code, msg, hint = ee.code, ee.msg, ee.hint
	case errors.As(err, &ue):
		code, hint = ExitUsage, ue.hint
	case errors.As(err, &se):
		code, hint = ExitIO, se.Hint
	default:
		code, hint = classify(err)
	}
	return code, msg, hint
}

// classify maps errors that are not idem's own types (cobra's among them).
func classify(err error) (int, string) {
	msg := err.Error()
	if strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "unknown flag") ||
		strings.HasPrefix(msg, "unknown shorthand flag") || strings.Contains(msg, "flag needs an argument") ||
		strings.HasPrefix(msg, "invalid argument") || strings.HasPrefix(msg, "required flag") ||
		strings.Contains(msg, "arg(s)") {
		return ExitUsage, "see 'idem --help'"
	}
	return ExitIO, ""
}

const exitStatusHelp = `
EXIT STATUS
  The command's own exit code when it ran or was replayed, else:
   64  usage: bad flag, bad key, no command
   65  key reused with a different command or payload
   74  ledger cannot be opened, read or written
   75  key in progress elsewhere (or --wait timed out), or lease lost
  124  last attempt timed out
  126  command not executable
  127  command not found
`

// helpTemplate is cobra's default; each command appends its EXIT STATUS.
func helpTemplate() string { return (&cobra.Command{}).HelpTemplate() }
