package cmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/ledger"
)

// runMain runs Main with args and a ledger in a temporary directory that
// none of these invocations should create.
func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv("IDEM_LEDGER", t.TempDir()+"/ledger.db")
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, &out, &errb, linkedAll())
	return code, out.String(), errb.String()
}

func TestExplain(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code int
		hint string
	}{
		{"usage", usagef("see 'idem run --help'", "missing --key"), exitcode.Usage, "see 'idem run --help'"},
		{"chosen", &exitError{code: exitcode.TempFail, msg: "busy", hint: "wait"}, exitcode.TempFail, "wait"},
		{"store", fmt.Errorf("reserve: %w", &ledger.StoreError{Op: "open", Path: "/x", Err: errors.New("disk full"), Hint: "free space"}),
			exitcode.IOErr, "free space"},
		{"unknown", errors.New("something idem has no name for"), exitcode.Software, "this is a bug in idem: please report it, with the command that caused it"},
		{"unknown wrapped", fmt.Errorf("run: %w", errors.New("boom")), exitcode.Software, "this is a bug in idem: please report it, with the command that caused it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg, hint := explain(tc.err)
			if code != tc.code || hint != tc.hint || msg == "" {
				t.Fatalf("explain(%v) = %d, %q, %q; want %d, the message, %q", tc.err, code, msg, hint, tc.code, tc.hint)
			}
		})
	}
}

// TestUnknownErrorExits70: an error of no type idem knows is one error line
// and one hint, and exit 70 (never 74, which says the ledger failed, nor 1,
// the command's most common code).
func TestUnknownErrorExits70(t *testing.T) {
	var errb bytes.Buffer
	a := &app{stderr: &errb, getenv: func(string) string { return "" }, colorFlag: "never"}
	if got, want := a.fail(errors.New("boom")), exitcode.Software; got != want {
		t.Fatalf("fail(boom) = %d, want %d", got, want)
	}
	want := "idem: error: boom\nidem: hint: this is a bug in idem: please report it, with the command that caused it\n"
	if errb.String() != want {
		t.Fatalf("stderr:\n%s\nwant:\n%s", errb.String(), want)
	}
}

// TestCobraErrorsAreUsageErrors: what cobra refuses (an unknown command,
// flag or help topic, a missing flag value, too many arguments) exits 64
// with one error line and one hint, and prints nothing on stdout.
func TestCobraErrorsAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		msg, hint string
	}{
		{[]string{"no-such-command"}, `unknown command "no-such-command" for "idem"`, `see 'idem --help'`},
		{[]string{"runn"}, `unknown command "runn" for "idem"`, `did you mean 'idem run'? see 'idem --help'`},
		{[]string{"--no-such-flag"}, `unknown flag: --no-such-flag`, `see 'idem --help'`},
		{[]string{"run", "--no-such-flag"}, `unknown flag: --no-such-flag`, `see 'idem run --help'`},
		{[]string{"run", "-Z"}, `unknown shorthand flag: 'Z' in -Z`, `see 'idem run --help'`},
		{[]string{"run", "--key"}, `flag needs an argument: --key`, `see 'idem run --help'`},
		{[]string{"inspect", "--limit", "many"}, `invalid --limit "many": want a whole number`, `see 'idem inspect --help'`},
		{[]string{"inspect", "evt:a:1", "evt:a:2"}, `accepts at most 1 arg(s), received 2`, `see 'idem inspect --help'`},
		{[]string{"man", "extra"}, `unknown command "extra" for "idem man"`, `see 'idem man --help'`},
		{[]string{"completion", "bash", "extra"}, `unknown command "extra" for "idem completion bash"`, `see 'idem completion bash --help'`},
		{[]string{"help", "nosuch"}, `unknown help topic "nosuch"`, `see 'idem --help'`},
		{[]string{"__complete"}, `requires at least 1 arg(s), only received 0`, `see 'idem __complete --help'`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runMain(t, tc.args...)
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if code != exitcode.Usage || stdout != "" || len(lines) != 2 {
				t.Fatalf("exit %d, stdout %q, stderr:\n%s\nwant exit 64, no stdout, an error line and a hint", code, stdout, stderr)
			}
			if !strings.HasPrefix(lines[0], "idem: error: "+tc.msg) || lines[1] != "idem: hint: "+tc.hint {
				t.Fatalf("stderr:\n%s\nwant:\nidem: error: %s...\nidem: hint: %s", stderr, tc.msg, tc.hint)
			}
		})
	}
}

// TestHelpExitStatusIsTheTable: `idem --help` lists every code of the
// exit-code table with its meaning, in order.
func TestHelpExitStatusIsTheTable(t *testing.T) {
	code, stdout, _ := runMain(t, "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	_, section, ok := strings.Cut(stdout, "\nEXIT STATUS\n")
	if !ok {
		t.Fatalf("no EXIT STATUS section:\n%s", stdout)
	}
	lines := strings.Split(strings.TrimSuffix(section, "\n"), "\n")[1:] // after the lead line
	row := regexp.MustCompile(`^ *(\S+)  (.+)$`)
	var got []string
	for _, l := range lines {
		m := row.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("EXIT STATUS line %q is not CODE  MEANING", l)
		}
		got = append(got, m[1]+" "+m[2])
	}
	checkTable(t, "idem --help", got)
}

// TestManExitStatusIsTheTable: the manual page's EXIT STATUS is the table.
func TestManExitStatusIsTheTable(t *testing.T) {
	code, stdout, _ := runMain(t, "man")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	_, section, ok := strings.Cut(stdout, ".SH \"EXIT STATUS\"\n")
	if !ok {
		t.Fatalf("no EXIT STATUS section")
	}
	section, _, _ = strings.Cut(section, "\n.SH ")
	lines := strings.Split(section, "\n")
	var got []string
	for i := 0; i < len(lines); i++ {
		if lines[i] != ".TP" {
			continue
		}
		if i+2 >= len(lines) || !strings.HasPrefix(lines[i+1], ".B ") {
			t.Fatalf("a .TP without .B CODE and a meaning: %q", lines[i:])
		}
		got = append(got, strings.TrimPrefix(lines[i+1], ".B ")+" "+strings.ReplaceAll(lines[i+2], `\-`, "-"))
		i += 2
	}
	checkTable(t, "idem man", got)
}

func checkTable(t *testing.T, what string, got []string) {
	t.Helper()
	var want []string
	for _, e := range exitcode.Table() {
		want = append(want, e.Label()+" "+e.Plain())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s: EXIT STATUS is\n%s\nwant the exit-code table:\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRunHelpExitStatus: `idem run --help` lists the codes run exits with,
// with what they mean for run: not inspect's, purge's or key's.
func TestRunHelpExitStatus(t *testing.T) {
	code, stdout, _ := runMain(t, "run", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	_, section, ok := strings.Cut(stdout, "\nEXIT STATUS\n")
	if !ok {
		t.Fatalf("no EXIT STATUS section:\n%s", stdout)
	}
	var want []string
	for _, e := range exitcode.Table() {
		if e.Run != "" {
			want = append(want, fmt.Sprintf("%5s  %s", e.Label(), e.PlainRun()))
		}
	}
	got := strings.Split(strings.TrimSuffix(section, "\n"), "\n")[1:] // after the lead line
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("run's EXIT STATUS is\n%s\nwant run's rows of the table:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, other := range []string{"inspect", "purge", "key did"} {
		if strings.Contains(section, other) {
			t.Errorf("run's EXIT STATUS mentions %s:\n%s", other, section)
		}
	}
}

// TestManCoversEveryCommand: the manual page has a section for every
// command idem lists in its help (but help, completion and man itself),
// and names every environment variable idem reads or sets that a user
// may meet.
func TestManCoversEveryCommand(t *testing.T) {
	code, page, _ := runMain(t, "man")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	root := newRootCmd(&app{getenv: func(string) string { return "" }, colorFlag: "auto"}, []string{"--help"})
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help", "completion", "man":
			continue
		}
		if c.IsAvailableCommand() && !strings.Contains(page, ".SH \"IDEM "+strings.ToUpper(c.Name())+"\"\n") {
			t.Errorf("the manual page has no section for idem %s", c.Name())
		}
	}
	for _, v := range []string{"IDEM_LEDGER", "IDEM_LEDGER_SCHEMA", "IDEM_ALLOW_OTHER_OWNER", "IDEM_KEY", "IDEM_TOKEN", "IDEM_RUN", "IDEM_RETRY_AFTER"} {
		if !strings.Contains(page, ".B "+v+"\n") {
			t.Errorf("the manual page's ENVIRONMENT does not name %s", v)
		}
	}
}
