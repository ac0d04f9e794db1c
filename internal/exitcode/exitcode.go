// Package exitcode is idem's table of its own exit codes: each code as a
// named constant, with its one-line meaning. The help's and the manual's
// EXIT STATUS sections are generated from it, and a test holds the tables
// of docs/guide.md and the README to it. Codes follow sysexits(3) and
// timeout(1).
package exitcode

import (
	"strconv"
	"strings"
)

// idem's own exit codes.
const (
	OK         = 0   // any other command (inspect, purge, check, backup, metrics, key) did what was asked
	NoRecord   = 1   // inspect: no record for the key
	Usage      = 64  // EX_USAGE
	DataErr    = 65  // EX_DATAERR: key reused with another fingerprint
	Software   = 70  // EX_SOFTWARE: an error idem has no name for (a bug)
	IOErr      = 74  // EX_IOERR: the ledger cannot be opened, read or written, or is damaged
	TempFail   = 75  // EX_TEMPFAIL: try again later
	Timeout    = 124 // timeout(1): idem stopped the last attempt
	CannotExec = 126 // the command is not executable
	NotFound   = 127 // the command was not found
	Signal     = 128 // idem was interrupted by signal N: it exits Signal+N
)

// Signaled is the code for a death by, or an interruption by, signal sig,
// as shells report it: 128+sig.
func Signaled(sig int) int { return Signal + sig }

// Source says whose exit code idem exits with. The ledger stores it as
// text ("child" or "idem").
type Source string

const (
	// SourceChild: the command's own code (it ran, or was replayed).
	SourceChild Source = "child"
	// SourceIdem: a code idem chose (it timed the command out, was
	// interrupted, or failed itself).
	SourceIdem Source = "idem"
)

// Entry is one row of the table.
type Entry struct {
	Code    int
	Name    string // the constant's name
	Meaning string // one line; `--flag` marks literal text
	// Run is what the code means for idem run, in Meaning's form; "":
	// run never exits with it.
	Run string
}

// Label is the code as the table shows it: "64", or "128+N" for Signal.
func (e Entry) Label() string {
	if e.Code == Signal {
		return "128+N"
	}
	return strconv.Itoa(e.Code)
}

// Plain is Meaning without its literal-text marks, for the help and the
// manual page.
func (e Entry) Plain() string { return plain(e.Meaning) }

// PlainRun is Run without its literal-text marks, for run's help.
func (e Entry) PlainRun() string { return plain(e.Run) }

func plain(s string) string { return strings.ReplaceAll(s, "`", "") }

// Command is the meaning of the row that comes before the table: a command
// that ran, or was replayed, gives idem its own exit code.
const Command = "the command ran, or was replayed: its exit code"

// Table returns idem's own exit codes in ascending order.
func Table() []Entry {
	// every is a code every command may exit with, run included.
	every := func(code int, name, meaning string) Entry { return Entry{code, name, meaning, meaning} }
	const busy = "key in progress elsewhere (or `--wait` timed out), lease lost or lapsed (idem itself paused), or `--deadline` passed before any attempt ran"
	return []Entry{
		{OK, "OK", "any other command (inspect, purge, check, backup, metrics, key) did what was asked", ""},
		{NoRecord, "NoRecord", "inspect: no record for KEY", ""},
		every(Usage, "Usage", "usage: bad flag, bad key, no command"),
		every(DataErr, "DataErr", "key reused with a different command or payload"),
		every(Software, "Software", "internal error in idem (a bug: please report it)"),
		{IOErr, "IOErr", "ledger cannot be opened, read or written, or lease renewals failed; check: it is damaged", "ledger cannot be opened, read or written, or lease renewals failed"},
		{TempFail, "TempFail", busy + "; purge: a live record was kept", busy},
		every(Timeout, "Timeout", "last attempt timed out"),
		every(CannotExec, "CannotExec", "command not executable"),
		every(NotFound, "NotFound", "command not found"),
		every(Signal, "Signal", "idem was interrupted by signal N"),
	}
}
