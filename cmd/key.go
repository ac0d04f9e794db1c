package cmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/key"
)

func newKeyCmd(a *app) *cobra.Command {
	var per periodFlags
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

--period adds the label of the period now is in, in the local time zone
or --tz, as the last part: 2026-12-03T14 (hour), 2026-12-03 (day),
2026-W49 (ISO week), 2026-12 (month). Every label names one span of real
time: a day with a clock change is 23 or 25 hours long; the hour that
clocks going back repeat is two periods, the second labelled 2026-11-01T01b.
--at TIME (RFC 3339) gives the label of another instant: a backfill, a test.

Put '--' before parts that start with '-'.`,
		Example: `  # a key per pipeline, branch and step
  idem run --key "$(idem key deploy "$CI_PIPELINE_ID" "$BRANCH")" -- ./deploy.sh

  # event ids with characters keys do not allow
  idem key webhook 'evt/2026 12/#42'
  webhook:evt_2026_12__42::47729443def5c046

  # once per day, without date(1) and cron's % escape
  idem key --period day backup
  backup:2026-12-03
  idem key --period week --tz Europe/Berlin --at 2026-12-31T23:30:00Z report
  report:2026-W53`,
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
			if on, err := per.set(); err != nil {
				return err
			} else if on {
				label, err := per.label(a)
				if err != nil {
					return err
				}
				args = append(args, label)
			}
			if _, err := fmt.Fprintln(a.stdout, key.Build(args...)); err != nil {
				return &exitError{code: exitcode.IOErr, msg: fmt.Sprintf("write the key: %v", err)}
			}
			return nil
		},
	}
	unitHelp, tzHelp := periodHelp()
	c.Flags().StringVar(&per.unit, "period", "", unitHelp)
	c.Flags().StringVar(&per.tz, "tz", "", tzHelp)
	c.Flags().StringVar(&per.at, "at", "", "the instant whose period --period names, in RFC 3339 (2026-12-03T14:00:00Z); default now")
	helpSection(a, c, exitSection(
		exitLine{exitcode.OK, "printed the key"},
		exitLine{exitcode.Usage, "usage: no PART, or an empty one; a bad --period, --tz or --at"},
		exitLine{exitcode.IOErr, "the key could not be written to stdout"},
	))
	return c
}
