// Package cmdline reads what an idem command line asks for before cobra
// parses it: the subcommand it names, and whether idem-net must serve it.
// It links nothing but the standard library's strings (pgdsn too needs
// nothing else), so that idem can ask it from package initialisation
// (internal/handoff).
package cmdline

import (
	"strings"

	"github.com/idemhq/idem/internal/ledger/pgdsn"
)

// LeadingWord is the first argument that is not the root's --ledger or
// --color (or their values), when it is no flag: the word that names the
// subcommand, or a typo of it; "" otherwise.
func LeadingWord(args []string) string {
	for i := 0; i < len(args); i++ {
		switch s := args[i]; {
		case s == "--ledger" || s == "--color":
			i++
		case strings.HasPrefix(s, "--ledger=") || strings.HasPrefix(s, "--color="):
		case strings.HasPrefix(s, "-"):
			return ""
		default:
			return s
		}
	}
	return ""
}

// ForCompanion reports whether args (idem's, without the program's name)
// and the environment plainly ask for what only the companion executable
// links: a subcommand that opens the ledger, on a PostgreSQL ledger
// (--ledger, else IDEM_LEDGER), or a run with a ping URL (--ping, or a
// non-empty IDEM_PING_URL). It reads the arguments up to a bare "--"
// without knowing which flags take values, so it can be wrong about a
// command line whose values look like those flags (a --key named
// "--ledger"); that costs only time, since the companion serves every
// invocation as idem does, and idem hands over by itself whatever this
// leaves out.
func ForCompanion(args []string, getenv func(string) string) bool {
	word := LeadingWord(args)
	switch word {
	case "run", "inspect", "purge", "check", "schema", "backup", "metrics":
	default:
		return false
	}
	ledger, ledgerSet, ping := "", false, false
	for i := 0; i < len(args) && args[i] != "--"; i++ {
		s := args[i]
		switch {
		case s == "--ledger" && i+1 < len(args):
			i++
			ledger, ledgerSet = args[i], true
		case strings.HasPrefix(s, "--ledger="):
			ledger, ledgerSet = strings.TrimPrefix(s, "--ledger="), true
		case s == "--ping" || strings.HasPrefix(s, "--ping="):
			ping = true
		}
	}
	if !ledgerSet {
		ledger = getenv("IDEM_LEDGER")
	}
	if ledger != "" && pgdsn.Is(ledger) {
		return true
	}
	return word == "run" && (ping || getenv("IDEM_PING_URL") != "")
}
