package cmd

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/location"
)

// usageError marks bad invocations (exit 64), idem's own and a backend's
// about how a location is written.
type usageError = location.UsageError

func usagef(hint, format string, args ...any) error {
	return location.Usagef(hint, format, args...)
}

// asUsage makes err, an error of cobra's about c's flags or arguments, a
// usage error that points to c's help.
func asUsage(err error, c *cobra.Command) error {
	if ue := (*usageError)(nil); errors.As(err, &ue) {
		return err
	}
	hint := fmt.Sprintf("see '%s --help'", c.CommandPath())
	if name, ok := strings.CutPrefix(err.Error(), "unknown flag: --"); ok {
		if s := flagSuggestion(c, name); s != "" {
			hint = fmt.Sprintf("did you mean --%s? %s", s, hint)
		}
	}
	return &usageError{Err: plainFlagError(err), Hint: hint}
}

// pflagParse matches pflag's message for a value its strconv parser
// refused: `invalid argument "three" for "--max-attempts" flag:
// strconv.ParseInt: parsing "three": invalid syntax`. It is compiled when
// a flag was refused, not at every start: compiling it at package
// initialisation cost every run of idem page faults and allocations.
const pflagParse = `^invalid argument ("(?:[^"\\]|\\.)*") for "(-[^"]*)" flag: strconv\.Parse(\w+): parsing "(?:[^"\\]|\\.)*": (.*)$`

// plainFlagError says in words what a flag's value should be, instead of
// the Go parser's message.
func plainFlagError(err error) error {
	m := regexp.MustCompile(pflagParse).FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	flag, value, kind, why := m[2], m[1], m[3], m[4]
	if i := strings.Index(flag, ", "); i >= 0 {
		flag = flag[i+2:] // "-n, --max-attempts": the long name
	}
	want := map[string]string{"Int": "a whole number", "Uint": "a whole number, 0 or more", "Float": "a number", "Bool": "true or false"}[kind]
	if want == "" {
		want = "another value"
	}
	if strings.Contains(why, "out of range") {
		return fmt.Errorf("invalid %s %s: out of range", flag, value)
	}
	return fmt.Errorf("invalid %s %s: want %s", flag, value, want)
}

// usageErrors makes cobra's argument errors usage errors throughout the
// tree below root. It adds cobra's help command now, to check its topic.
func usageErrors(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	for _, c := range root.Commands() {
		if c.Name() == "help" && c.Args == nil {
			c.Args = unknownHelpTopic
		}
	}
	usageArgs(root)
}

// usageArgs makes the argument errors of c and of every command below it
// usage errors: cobra's validators (cobra.NoArgs, cobra.MaximumNArgs, those
// of its completion commands) return plain errors.
func usageArgs(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return asUsage(err, c)
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}

// unknownCommand is the root's Args: with a root that runs (it prints its
// help), cobra hands it the words that name no command.
func unknownCommand(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	hint := fmt.Sprintf("see '%s --help'", c.CommandPath())
	if s := commandSuggestion(c, args[0]); s != "" {
		hint = fmt.Sprintf("did you mean '%s %s'? see '%s --help'", c.CommandPath(), s, c.CommandPath())
	} else if f := c.Flags().Lookup(args[0]); f != nil {
		// "idem version": a flag's name typed as a command.
		hint = fmt.Sprintf("did you mean '%s --%s'? see '%s --help'", c.CommandPath(), f.Name, c.CommandPath())
	}
	return &usageError{Err: fmt.Errorf("unknown command %q for %q", args[0], c.CommandPath()), Hint: hint}
}

// unknownHelpTopic is the Args of cobra's help command: cobra finds no
// unknown topic once the root takes arguments (unknownCommand).
func unknownHelpTopic(c *cobra.Command, args []string) error {
	root := c.Root()
	if target, rest, err := root.Find(args); err == nil && target == root && len(rest) > 0 {
		return usagef(fmt.Sprintf("see '%s --help'", root.CommandPath()), "unknown help topic %q", strings.Join(args, " "))
	}
	return nil
}

// exitError carries an exit code, a message and a hint chosen by a command.
type exitError struct {
	code int
	msg  string
	hint string
	// reason names the outcome for --report where the code alone does
	// not (75: busy, a wait or a deadline that ran out, a lost lease).
	reason string
}

func (e *exitError) Error() string { return e.msg }

// exitStatus is the exit code, not 0, of a command that ran to completion
// (a child's code that idem passes on): Main exits with it and prints
// nothing.
type exitStatus int

func (s exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(s)) }

// status returns nil for code 0, else the exitStatus.
func status(code int) error {
	if code == exitcode.OK {
		return nil
	}
	return exitStatus(code)
}

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
// it too, so the report and the exit status agree). An error of a type
// idem does not know is a bug: exit 70.
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
		code, hint = exitcode.Usage, ue.Hint
	case errors.As(err, &se):
		code, hint = exitcode.IOErr, se.Hint
	default:
		code, hint = exitcode.Software, "this is a bug in idem: please report it, with the command that caused it"
	}
	return code, msg, hint
}

// exitStatusHelp is the root help's EXIT STATUS section: the whole table.
func exitStatusHelp() string {
	return exitTableHelp(exitcode.Entry.Plain)
}

// runExitStatusHelp is run's EXIT STATUS section: the table's rows that
// run exits with, with what they mean for run.
func runExitStatusHelp() string {
	return exitTableHelp(exitcode.Entry.PlainRun)
}

// exitTableHelp is an EXIT STATUS section of the table's rows, each with
// meaning's text; a row without one is left out.
func exitTableHelp(meaning func(exitcode.Entry) string) string {
	var b strings.Builder
	b.WriteString("\nEXIT STATUS\n  The command's own exit code when it ran or was replayed, else:\n")
	for _, e := range exitcode.Table() {
		if m := meaning(e); m != "" {
			fmt.Fprintf(&b, "%5s  %s\n", e.Label(), m)
		}
	}
	return b.String()
}

// exitLine is one code of a subcommand's EXIT STATUS, with what it means
// for that command.
type exitLine struct {
	code    int
	meaning string
}

// exitSection is a subcommand's EXIT STATUS section: the codes it exits
// with (see helpSection).
func exitSection(lines ...exitLine) func() string {
	return func() string {
		var b strings.Builder
		b.WriteString("\nEXIT STATUS\n")
		for _, l := range lines {
			fmt.Fprintf(&b, "%4d  %s\n", l.code, l.meaning)
		}
		return b.String()
	}
}

// helpSection makes c's help cobra's own followed by the text section
// returns, built when help is shown rather than at every start of idem: a
// run does not pay for its help. cobra writes its own help without a
// template (text/template) as long as no command sets one. The commands
// below c that have no help of their own get c's. A help func returns no
// error: a failed write is kept in a.helpErr, for main to report.
func helpSection(a *app, c *cobra.Command, section func() string) {
	help := c.HelpFunc()
	c.SetHelpFunc(func(shown *cobra.Command, args []string) {
		out := shown.OutOrStdout()
		w := &errWriter{w: out}
		shown.SetOut(w)
		help(shown, args)
		io.WriteString(w, section())
		shown.SetOut(out)
		if a.helpErr == nil {
			a.helpErr = w.err
		}
	})
}

// errWriter passes writes on to w and keeps the first error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if e.err == nil {
		e.err = err
	}
	return n, err
}
