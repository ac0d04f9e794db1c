package cmd

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/exitcode"
)

// newManCmd writes idem's manual page, generated from the command tree.
func newManCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "man",
		Short: "Write the idem(1) manual page (roff) to stdout",
		Long:  "Write the idem(1) manual page, in roff, to stdout: man -l <(idem man), or save it as idem.1.",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if _, err := a.stdout.Write(manPage(c.Root(), manDate(a.getenv("SOURCE_DATE_EPOCH")))); err != nil {
				return &exitError{code: exitcode.IOErr, msg: fmt.Sprintf("write the manual page: %v", err)}
			}
			return nil
		},
	}
	helpSection(a, c, writerExits("the manual page"))
	return c
}

// writerExits is the EXIT STATUS section of a command that only writes
// what to stdout (man, completion).
func writerExits(what string) func() string {
	return exitSection(
		exitLine{exitcode.OK, "wrote " + what},
		exitLine{exitcode.Usage, "usage: bad arguments"},
		exitLine{exitcode.IOErr, what + " could not be written to stdout"},
	)
}

// manDate is the page's date: SOURCE_DATE_EPOCH's when set, so that a
// release's page is the same on every rebuild of its commit, else today.
func manDate(sourceDateEpoch string) time.Time {
	if n, err := strconv.ParseInt(sourceDateEpoch, 10, 64); err == nil {
		return time.Unix(n, 0).UTC()
	}
	return time.Now()
}

// manPage renders the root command's page with every subcommand's usage,
// flags and examples, then the EXIT STATUS and ENVIRONMENT sections. It is
// written by hand: cobra/doc's markdown-to-roff dependencies cost every
// idem invocation ~0.3 ms of package initialisation.
func manPage(root *cobra.Command, date time.Time) []byte {
	var s strings.Builder
	fmt.Fprintf(&s, ".nh\n.TH \"IDEM\" \"1\" \"%s\" \"idem %s\" \"User Commands\"\n",
		date.Format("Jan 2006"), roff(versionString()))
	fmt.Fprintf(&s, ".SH NAME\nidem \\- %s\n", roff(root.Short))
	s.WriteString(".SH SYNOPSIS\n")
	for _, name := range manOrder() {
		if c := subcommandOf(root, name); c != nil {
			fmt.Fprintf(&s, "\\fB%s\\fP\n.br\n", roff(c.UseLine()))
		}
	}
	fmt.Fprintf(&s, ".SH DESCRIPTION\n%s\n", roffText(root.Long))
	s.WriteString(".SH OPTIONS\n.RS\n.nf\n" + roff(root.Flags().FlagUsagesWrapped(manColumns)) + ".fi\n.RE\n")
	s.WriteString(".SH EXAMPLE\n.EX\n" + roff(root.Example) + "\n.EE\n")
	for _, name := range manOrder() {
		c := subcommandOf(root, name)
		if c == nil {
			continue
		}
		fmt.Fprintf(&s, ".SH \"IDEM %s\"\n", strings.ToUpper(c.Name()))
		fmt.Fprintf(&s, ".PP\n\\fB%s\\fP\n", roff(c.UseLine()))
		fmt.Fprintf(&s, ".PP\n%s\n", roffText(c.Long))
		if d := commandDetails(c); d != "" {
			fmt.Fprintf(&s, ".PP\n%s\n", roffText(d))
		}
		if fl := c.NonInheritedFlags(); fl.HasAvailableFlags() {
			s.WriteString(".PP\nOptions:\n.PP\n.RS\n.nf\n")
			s.WriteString(roff(fl.FlagUsagesWrapped(manColumns)))
			s.WriteString(".fi\n.RE\n")
		}
		if c.Example != "" {
			s.WriteString(".PP\nExamples:\n.PP\n.RS\n.nf\n")
			s.WriteString(roff(c.Example) + "\n")
			s.WriteString(".fi\n.RE\n")
		}
	}
	s.WriteString(manExitStatus())
	s.WriteString(manTail)
	return []byte(s.String())
}

// manColumns is the width the page's option lists are wrapped to: they
// are set unfilled (.nf), so man cannot wrap them, and an 80-column
// terminal shows them indented by the page's margin.
const manColumns = 72

// subcommandOf returns root's available subcommand called name, or nil.
func subcommandOf(root *cobra.Command, name string) *cobra.Command {
	for _, c := range root.Commands() {
		if c.Name() == name && c.IsAvailableCommand() {
			return c
		}
	}
	return nil
}

// manExitStatus is the page's EXIT STATUS section: the whole exit-code
// table.
func manExitStatus() string {
	var s strings.Builder
	s.WriteString(".SH \"EXIT STATUS\"\n.PP\nThe command's own exit code when it ran or was replayed; otherwise idem's:\n")
	for _, e := range exitcode.Table() {
		fmt.Fprintf(&s, ".TP\n.B %s\n%s\n", e.Label(), roffDashes(roff(e.Plain())))
	}
	s.WriteString(".PP\nAn \"idem: error:\" line on stderr means idem chose the code; without it the code is the command's.\n")
	return s.String()
}

// roffDashes makes every - a minus sign (\-), as options are written.
func roffDashes(s string) string { return strings.ReplaceAll(s, "-", `\-`) }

// roff escapes text for a roff line: backslashes, and a leading . or '.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			lines[i] = `\&` + l
		}
	}
	return strings.Join(lines, "\n")
}

// roffText turns paragraphs separated by blank lines into .PP paragraphs.
func roffText(s string) string {
	return strings.ReplaceAll(roff(strings.TrimSpace(s)), "\n\n", "\n.PP\n")
}

const manTail = `.SH ENVIRONMENT
.TP
.B IDEM_LEDGER
the ledger: a SQLite file path, or a PostgreSQL database for one shared by many hosts, as postgres://USER@HOST:PORT/DATABASE or in libpq's keyword/value form (host=HOST dbname=DATABASE user=USER). \-\-ledger overrides it. The command idem runs gets it without its password.
.TP
.B IDEM_LEDGER_SCHEMA
the schema of a PostgreSQL ledger (default idem): lower\-case letters, digits and _. Every host of a fleet must use the same.
.TP
.B STATE_DIRECTORY
set by systemd for a service with StateDirectory=: when IDEM_LEDGER and \-\-ledger are unset, the ledger is ledger.db in its first directory. A login shell does not see it: inspect a service's ledger with \-\-ledger /var/lib/NAME/ledger.db.
.TP
.B XDG_STATE_HOME
when IDEM_LEDGER, \-\-ledger and STATE_DIRECTORY are unset and this is an absolute path, the ledger is $XDG_STATE_HOME/idem/ledger.db; else ~/.local/state/idem/ledger.db.
.TP
.B HOME
the home directory of the default ledger; when unset (a daemon), the password database's (a static build reads only /etc/passwd). With neither, idem exits 74: set IDEM_LEDGER.
.TP
.B IDEM_ALLOW_OTHER_OWNER
set to 1, root may use a ledger file that another user owns (refused otherwise, as it would decide what runs and read what the commands print); the files idem creates beside it are given to that user.
.TP
.B NO_COLOR
when set and not empty, idem's messages are not coloured (unless \-\-color always).
.TP
.B IDEM_PING_URL
the ping URL of idem run when \-\-ping is not given: healthchecks.io's ping API, with {key} and {group} replaced (see \-\-ping). A secret: idem shows only its scheme and host, and takes it out of the command's environment. Empty: no pings.
.TP
.B HTTPS_PROXY, HTTP_PROXY, NO_PROXY
the proxy for pings (or their lower\-case forms), the variables curl reads; a loopback address is never proxied.
.TP
.B TZ
the time zone of \-\-period when \-\-tz is not given (else /etc/localtime). One that names no zone is refused rather than read as UTC.
.TP
.B PGPASSWORD, PGPASSFILE, PGHOST, PGSSLMODE, PGCONNECT_TIMEOUT
the usual libpq variables apply to a PostgreSQL ledger, and pass to the command untouched. A password file that its group or others may read is ignored, as libpq ignores it.
.PP
idem sets these in the command's environment:
.TP
.B IDEM_KEY
the key; pass it on as an API's idempotency key (curl \-H "Idempotency\-Key: $IDEM_KEY").
.TP
.B IDEM_ATTEMPT
the attempt number, 1\-based, counted across invocations.
.TP
.B IDEM_TOKEN
the fencing token, higher for every new owner of the key: a store downstream refuses a write whose token is lower than one it has seen, so a run that lost its lease cannot overwrite a newer one's.
.TP
.B IDEM_RUN
the run's identity: a later run of the key finds and stops this run's processes by it (Linux). Leave it in the environment of what the command starts.
.TP
.B IDEM_MAX_ATTEMPTS
the key's budget (\-\-max\-attempts).
.TP
.B IDEM_RETRY_AFTER
the path of a file (not created until written): write a duration (30s, 1m, or seconds) there before exiting with a transient code to ask for that delay before the next attempt (capped by \-\-max\-delay).
.SH FILES
.TP
.I ~/.local/state/idem/ledger.db
the default ledger (mode 0600, in a 0700 directory).
.SH NOTES
idem suppresses duplicates; it is not exactly\-once. A crash (power loss, SIGKILL) between the command's side effect and the recorded outcome makes the next run execute the command again. Pass $IDEM_KEY downstream to close that window.
`
