package cmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/key"
)

func newKeyCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "key PART...",
		Short: "Build a valid key from arbitrary parts",
		Long: `Print a valid idempotency key built from PARTs (branch names, event ids,
file names, anything), for 'idem run --key'. It opens no ledger.

The parts are joined with ':'. Inside a part, letters, digits and ':' '_'
'-' '.' are kept and every other character becomes '_'. When that changed
anything, when a part holds ':', when the result has no letter or digit,
or when it is shorter than 8 or longer than 128 characters, the key is the
first 110 characters of the joined text (a ':' there that would leave an
empty part made '_') followed by '::' and 16 hex digits of a SHA-256 over
all the parts, length-prefixed. So:

  - the same parts always give the same key, on every host and version;
  - different parts give different keys ("a:b" as one part is not "a" "b");
  - keys stay readable and at most 128 characters, whatever the input.

An empty part is a usage error (exit 64): it is almost always an unset
variable ("$EVENT_ID"), and would give every such call one shared key.

Put '--' before parts that start with '-'.`,
		Example: `  # a key per pipeline, branch and step
  idem run --key "$(idem key deploy "$CI_PIPELINE_ID" "$BRANCH")" -- ./deploy.sh

  # event ids with characters keys do not allow
  idem key webhook 'evt/2026 12/#42'
  webhook:evt_2026_12__42::47729443def5c046`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("idem key PART [PART...]", "no parts: give at least one PART")
			}
			for i, p := range args {
				if p == "" {
					return usagef("check the variable that gives it: an unset one makes every call share one key",
						"part %d of %d is empty", i+1, len(args))
				}
			}
			if _, err := fmt.Fprintln(a.stdout, key.Build(args...)); err != nil {
				return &exitError{code: exitcode.IOErr, msg: fmt.Sprintf("write the key: %v", err)}
			}
			return nil
		},
	}
	c.SetHelpTemplate(exitSection(
		exitLine{exitcode.OK, "printed the key"},
		exitLine{exitcode.Usage, "usage: no PART, or an empty one"},
	))
	return c
}
