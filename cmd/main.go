// Package cmd is idem's command line: cobra commands that parse flags, call
// internal/ and render the result. It knows no SQL and starts no processes.
package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/fatih/color"
	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/postgres"
	"github.com/idemhq/idem/internal/ledger/sqlite"
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

// version is set at link time (-ldflags "-X github.com/idemhq/idem/cmd.version=v1.2.3").
var version = ""

// app holds what commands depend on, so tests can replace it and so that
// nothing (the ledger above all) is opened before a command needs it.
type app struct {
	stdin   *os.File
	stdout  io.Writer
	stderr  io.Writer
	getenv  func(string) string
	environ []string

	ledgerFlag string
	colorFlag  string

	// exitCode is what a command that ran to completion wants idem to exit with.
	exitCode int
	ui       *ui
}

// Main runs idem with args and returns the process exit code. It is the only
// place that prints errors and picks exit codes.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdin: os.Stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv, environ: os.Environ(), colorFlag: "auto"}
	root := newRootCmd(a, args)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return a.exitCode
	}
	return a.fail(err)
}

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

// subcommand returns the constructor of the subcommand called name, so that
// an invocation builds only the command it runs: a run does not pay for the
// flags and help of every other command (and of completion) at each start.
func subcommand(name string) func(*app) *cobra.Command {
	switch name {
	case "run":
		return newRunCmd
	case "inspect":
		return newInspectCmd
	case "purge":
		return newPurgeCmd
	case "key":
		return newKeyCmd
	}
	return nil
}

// invoked names the subcommand that args run, when it comes before any flag
// but the root's --ledger and --color; "" otherwise (help, --version,
// completion, man, a typo), and then the whole tree is built.
func invoked(args []string) string {
	for i := 0; i < len(args); i++ {
		switch s := args[i]; {
		case s == "--ledger" || s == "--color":
			i++
		case strings.HasPrefix(s, "--ledger=") || strings.HasPrefix(s, "--color="):
		case strings.HasPrefix(s, "-"):
			return ""
		default:
			if subcommand(s) == nil {
				return ""
			}
			return s
		}
	}
	return ""
}

// newRootCmd builds the command tree for args: the root with only the
// invoked subcommand, or everything.
func newRootCmd(a *app, args []string) *cobra.Command {
	root := &cobra.Command{
		Use:   "idem",
		Short: "Make shell commands safe to repeat",
		Long: `idem runs a command once per key, records its result in a ledger, and
replays the recorded output and exit code for every repeat. Cron jobs, CI
steps and webhook handlers are delivered at least once; wrapped in
'idem run --key KEY -- CMD', their side effect happens once per key.`,
		Example: `  # a cron job that must run once per day, even if cron fires twice
  idem run --key backup:$(date +%F) -- ./backup.sh

  # a CI deploy step keyed by commit: re-running the pipeline replays it
  idem run --key deploy:$CI_COMMIT_SHA --max-attempts 5 -- ./deploy.sh`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(c *cobra.Command, _ []string) error {
			switch a.colorFlag {
			case "auto", "always", "never":
			default:
				return usagef("use --color auto, always or never", "invalid --color %q", a.colorFlag)
			}
			if c.Flags().Changed("ledger") && a.ledgerFlag == "" {
				// Most likely --ledger "$UNSET": never fall back to another ledger.
				return usagef("name a ledger file, or leave --ledger out to use IDEM_LEDGER or the default", "--ledger is empty")
			}
			a.ui = newUI(a)
			return nil
		},
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &usageError{err: err, hint: fmt.Sprintf("see '%s --help'", c.CommandPath())}
	})
	root.CompletionOptions.HiddenDefaultCmd = false
	pf := root.PersistentFlags()
	pf.StringVar(&a.ledgerFlag, "ledger", "", "ledger file, or postgres://USER@HOST:PORT/DATABASE for a shared one (default $IDEM_LEDGER, else $XDG_STATE_HOME/idem/ledger.db)")
	pf.StringVar(&a.colorFlag, "color", "auto", "colour idem's messages: auto, always or never")
	root.SetHelpTemplate(root.HelpTemplate() + exitStatusHelp)
	if name := invoked(args); name != "" {
		root.AddCommand(subcommand(name)(a))
		root.CompletionOptions.DisableDefaultCmd = true
		return root
	}
	root.Version = versionString()
	root.AddCommand(newRunCmd(a))
	root.AddCommand(newInspectCmd(a), newPurgeCmd(a), newKeyCmd(a))
	root.AddCommand(newManCmd(a))
	initCompletionCmd(root)
	return root
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

// colorOn says whether to colour what goes to w: --color always, or
// --color auto with w a terminal, NO_COLOR unset and TERM not dumb.
func (a *app) colorOn(w io.Writer) bool {
	switch a.colorFlag {
	case "always":
		return true
	case "never":
		return false
	}
	return a.watched(w) && a.getenv("NO_COLOR") == ""
}

// watched says whether a person watches w: it is a terminal, and TERM is
// not dumb.
func (a *app) watched(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f) && a.getenv("TERM") != "dumb"
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

// ui renders idem's own lines on stderr.
type ui struct {
	w      io.Writer
	quiet  bool
	errTag *color.Color
	hint   *color.Color
	notice *color.Color
}

func newUI(a *app) *ui {
	u := &ui{w: a.stderr, errTag: color.New(color.FgRed, color.Bold), hint: color.New(color.FgYellow), notice: color.New(color.FgCyan)}
	on := a.colorOn(a.stderr)
	for _, c := range []*color.Color{u.errTag, u.hint, u.notice} {
		if on {
			c.EnableColor()
		} else {
			c.DisableColor()
		}
	}
	return u
}

func (u *ui) errorLine(msg, hint string) {
	u.startLine()
	fmt.Fprintf(u.w, "idem: %s %s\n", u.errTag.Sprint("error:"), oneLine(msg))
	if hint != "" {
		fmt.Fprintf(u.w, "idem: %s %s\n", u.hint.Sprint("hint:"), oneLine(hint))
	}
}

// noticef prints an idem: line unless --quiet.
func (u *ui) noticef(format string, args ...any) {
	if u.quiet {
		return
	}
	u.startLine()
	fmt.Fprintf(u.w, "idem: %s\n", oneLine(fmt.Sprintf(format, args...)))
}

// warnf prints an idem: warning: line unless --quiet.
func (u *ui) warnf(format string, args ...any) {
	if u.quiet {
		return
	}
	u.startLine()
	fmt.Fprintf(u.w, "idem: %s %s\n", u.hint.Sprint("warning:"), oneLine(fmt.Sprintf(format, args...)))
}

// oneLine keeps a message on one line whatever it quotes.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\n\r") {
		return s
	}
	return strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(s)
}
