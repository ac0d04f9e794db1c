package cmd

import (
	"fmt"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/period"
)

// periodFlags are --period, --tz and (idem key only) --at: which period's
// label a key gets.
type periodFlags struct {
	unit string
	tz   string
	at   string
}

// set reports whether a period was asked for; --tz or --at alone is a
// usage error.
func (p *periodFlags) set() (bool, error) {
	if p.unit != "" {
		return true, nil
	}
	for _, f := range [...]struct{ name, v string }{{"--tz", p.tz}, {"--at", p.at}} {
		if f.v != "" {
			return false, usagef("add --period hour, day, week or month", "%s needs --period", f.name)
		}
	}
	return false, nil
}

// label is the label of the period asked for (see internal/period): of
// --at, else of now (which a testhooks build may set), in --tz, else in
// the local zone.
func (p *periodFlags) label(a *app) (string, error) {
	u, err := period.ParseUnit(p.unit)
	if err != nil {
		return "", usagef("use --period hour, day, week or month", "--period: %v", err)
	}
	loc, err := p.zone(a.getenv)
	if err != nil {
		return "", err
	}
	when := testOnlyNow(a.now, a.getenv)()
	if p.at != "" {
		if when, err = time.Parse(time.RFC3339, p.at); err != nil {
			return "", usagef("give an RFC 3339 time, such as 2026-12-03T14:00:00Z or 2026-12-03T15:00:00+01:00",
				"invalid --at %q", p.at)
		}
	}
	return period.Label(u, when.In(loc)), nil
}

// zone is the zone of the period: --tz, else the local one. A TZ that
// names no zone is refused rather than read as UTC, which Go would do
// without a word.
func (p *periodFlags) zone(getenv func(string) string) (*time.Location, error) {
	if p.tz != "" {
		loc, err := period.Location(p.tz)
		if err != nil {
			return nil, usagef("give a zone of the IANA database, such as Europe/Berlin, America/New_York or UTC",
				"--tz: unknown %v", err)
		}
		return loc, nil
	}
	if tz, bad := badTZ(getenv); bad {
		return nil, usagef("set TZ to a zone of the IANA database (Europe/Berlin), or give --tz",
			"TZ=%q names no time zone idem knows, and --period would count in UTC", tz)
	}
	return time.Local, nil
}

// badTZ reports whether TZ names a zone that Go could not load, and so
// reads as UTC without a word: the local zone is then named "UTC" though
// TZ asked for another (a POSIX rule such as JST-9, a typo, a missing
// file).
func badTZ(getenv func(string) string) (tz string, bad bool) {
	tz = getenv("TZ")
	switch strings.TrimPrefix(tz, ":") {
	case "", "UTC":
		return tz, false
	}
	return tz, time.Local.String() == "UTC"
}

// periodHelp is the flags' help of --period and --tz.
func periodHelp() (unit, tz string) {
	return fmt.Sprintf("append the period's label to the key: %s (2026-12-03T14, 2026-12-03, 2026-W49, 2026-12)", period.Units),
		"time zone of --period (default: the local one, from $TZ or /etc/localtime)"
}
