// Package cmd is idem's command line: cobra commands that parse flags, call
// internal/ and render the result. It knows no SQL and starts no processes.
package cmd

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/cmdline"
	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/location"
	"github.com/idemhq/idem/internal/monitor"
)

// version and commit are set at link time (-ldflags "-X
// github.com/idemhq/idem/cmd.version=v1.2.3 -X
// github.com/idemhq/idem/cmd.commit=<rev>"): scripts/release sets both, so a
// release build names its commit without -buildvcs, which would fail in a
// tree that is not a git checkout.
var (
	version = ""
	commit  = ""
)

// app holds what commands depend on, so tests can replace it and so that
// nothing (the ledger above all) is opened before a command needs it.
type app struct {
	stdin   *os.File
	stdout  io.Writer
	stderr  io.Writer
	getenv  func(string) string
	environ []string

	// now is the local clock; a record's age is measured on its ledger's
	// (ledger.NowOf).
	now func() time.Time
	// backends opens the ledger, and only when a command asks for it:
	// nothing is opened to parse flags or print help. A ledger it names
	// a companion for is handed to that executable (handOff).
	backends *location.Registry
	// dial sends monitor pings; nil when this executable links no HTTP
	// client, and a run with a ping URL is handed to its companion.
	dial monitor.Dialer
	// argv0 and args are the process's command line, for handOff.
	argv0 string
	args  []string

	ledgerFlag string
	colorFlag  string

	ui *ui
	// helpErr is the first failed write of help text (see helpSection).
	helpErr error
	// cobraOut is stdout as cobra writes to it (help, --version, the
	// completion scripts), keeping its first failed write.
	cobraOut *errWriter
}

// newApp is the app of a process: its streams, arguments, environment and
// clock, and what this executable of idem's links in.
func newApp(args []string, stdout, stderr io.Writer, linked Linked) *app {
	return &app{stdin: os.Stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv, environ: os.Environ(),
		argv0: os.Args[0], args: args, now: time.Now, backends: linked.Backends, dial: linked.Ping, colorFlag: "auto"}
}

// Linked is what an executable of idem's links in beside its command
// line: the ledger backends, and the companion executables that keep
// what it does not link; and the sender of monitor pings, which idem
// leaves to idem-net (nil: a run with pings goes to the companion).
type Linked struct {
	Backends *location.Registry
	Ping     monitor.Dialer
}

// Main runs idem with args and returns the process exit code. It is the only
// place that prints errors and picks exit codes.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, linked Linked) int {
	return newApp(args, stdout, stderr, linked).main(ctx, args)
}

// main is Main for the app a, which a test may have given another clock,
// environment or backends.
func (a *app) main(ctx context.Context, args []string) int {
	root := newRootCmd(a, args)
	root.SetArgs(args)
	c, err := root.ExecuteContextC(ctx)
	var st exitStatus
	switch {
	case err == nil && a.helpErr != nil:
		err = &exitError{code: exitcode.IOErr, msg: "write the help: " + a.helpErr.Error()}
	case errors.As(err, &st):
		return int(st)
	case a.cobraOut != nil && a.cobraOut.err != nil:
		// What cobra wrote for idem (the version, a completion script)
		// could not be written: cobra returns that error, or none.
		err = &exitError{code: exitcode.IOErr, msg: "write the output: " + a.cobraOut.err.Error()}
	case err == nil:
		return exitcode.OK
	case c != nil && c.Name() == cobra.ShellCompRequestCmd:
		// cobra adds its __complete command while it executes, after
		// usageArgs; its one error is a missing command line.
		err = asUsage(err, c)
	}
	return a.fail(err)
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
	case "metrics":
		return newMetricsCmd
	case "backup":
		return newBackupCmd
	case "schema":
		return newSchemaCmd
	case "check":
		return newCheckCmd
	}
	return nil
}

// invoked names the subcommand that args run, when it comes before any flag
// but the root's --ledger and --color; "" otherwise (help, --version,
// completion, man, a typo), and then the whole tree is built.
func invoked(args []string) string {
	if w := cmdline.LeadingWord(args); subcommand(w) != nil {
		return w
	}
	return ""
}

// versionOnly reports whether args ask for the version and nothing else
// (beside the root's --ledger and --color).
func versionOnly(args []string) bool {
	seen := false
	for i := 0; i < len(args); i++ {
		switch s := args[i]; {
		case s == "--version" || s == "-v":
			seen = true
		case s == "--ledger" || s == "--color":
			i++
		case strings.HasPrefix(s, "--ledger=") || strings.HasPrefix(s, "--color="):
		default:
			return false
		}
	}
	return seen
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
		Example: `  # crontab: once per day, even if cron fires twice (the second waits, then
  # replays); cron's PATH is /usr/bin:/bin and it cuts a command at an
  # unescaped %, so name idem's directory and write \%
  PATH=/usr/local/bin:/usr/bin:/bin
  17 3 * * * idem run --key backup:$(date +\%F) --wait --deadline 2h -- /usr/local/bin/backup

  # a CI deploy step keyed by commit: re-running the pipeline replays it
  idem run --key deploy:$CI_COMMIT_SHA --max-attempts 5 -- ./deploy.sh`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// A root that runs (it prints its help) gets the words that name
		// no command, and makes them a usage error.
		Args: unknownCommand,
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
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
			if loc, err := a.backends.Lookup(a.ledgerFlag); err == nil && loc.HasPassword() {
				a.ui.warnf("the password on --ledger is visible to every user of this host (ps) while idem runs: give it in PGPASSFILE or PGPASSWORD, or put the DSN in IDEM_LEDGER")
			}
			return nil
		},
	}
	a.cobraOut = &errWriter{w: a.stdout}
	root.SetOut(a.cobraOut)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		// "idem rn --key k": the typo, not the flag cobra met next, is the error.
		if w := cmdline.LeadingWord(args); c == root && w != "" {
			if err := unknownCommand(c, []string{w}); err != nil {
				return err
			}
		}
		return asUsage(err, c)
	})
	root.SuggestionsMinimumDistance = 2
	root.CompletionOptions.HiddenDefaultCmd = false
	pf := root.PersistentFlags()
	pf.StringVar(&a.ledgerFlag, "ledger", "", "ledger file, or a PostgreSQL DSN for a shared one: postgres://USER@HOST:PORT/DATABASE or 'host=HOST dbname=DATABASE user=USER' (default $IDEM_LEDGER, else ledger.db in $STATE_DIRECTORY under systemd, else $XDG_STATE_HOME/idem/ledger.db, else ~/.local/state/idem/ledger.db)")
	pf.StringVar(&a.colorFlag, "color", "auto", "colour idem's messages: auto, always or never")
	helpSection(a, root, exitStatusHelp)
	if name := invoked(args); name != "" {
		root.AddCommand(subcommand(name)(a))
		root.CompletionOptions.DisableDefaultCmd = true
		usageArgs(root) // "help" comes first in args when it runs: not here
		return root
	}
	root.Version = versionString()
	if versionOnly(args) {
		// --version needs no command below the root: building them all
		// (their flags and help) is most of what it would cost.
		root.CompletionOptions.DisableDefaultCmd = true
		return root
	}
	root.AddCommand(newRunCmd(a))
	root.AddCommand(newInspectCmd(a), newPurgeCmd(a), newKeyCmd(a), newMetricsCmd(a), newBackupCmd(a), newCheckCmd(a), newSchemaCmd(a))
	root.AddCommand(newManCmd(a))
	initCompletionCmd(a, root)
	completeFlagValues(root)
	usageErrors(root)
	return root
}
