package flagval

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Day is the length of the "d" unit: 24 hours, ignoring daylight saving.
const Day = 24 * time.Hour

// durationUnit returns the length of a unit in nanoseconds, or 0 if unknown.
func durationUnit(u string) uint64 {
	switch u {
	case "ns":
		return uint64(time.Nanosecond)
	case "us", "\u00b5s", "\u03bcs": // micro sign and Greek mu, as time.ParseDuration
		return uint64(time.Microsecond)
	case "ms":
		return uint64(time.Millisecond)
	case "s":
		return uint64(time.Second)
	case "m":
		return uint64(time.Minute)
	case "h":
		return uint64(time.Hour)
	case "d":
		return uint64(Day)
	}
	return 0
}

// ParseDuration parses a duration like time.ParseDuration, plus a "d" unit
// of 24 hours that combines with the others: "30s", "1h30m", "1d12h", "1.5d".
// Surrounding spaces are ignored; "0" needs no unit.
//
// It returns an error that quotes s for an empty string, a negative value
// (including "-0"), a missing or unknown unit, or a total above
// math.MaxInt64 nanoseconds (about 292 years); it never wraps.
func ParseDuration(s string) (time.Duration, error) {
	d, err := parseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: %w", s, err)
	}
	return d, nil
}

const (
	durationSyntax   = "want a number and a unit (ns, us, ms, s, m, h, d), e.g. 30s, 1h30m or 7d"
	durationTooLarge = "too large: at most about 292 years (106751d)"
)

func parseDuration(s string) (time.Duration, error) {
	switch {
	case s == "0" || s == "+0":
		return 0, nil
	case s == "":
		return 0, errors.New(durationSyntax)
	case s[0] == '-':
		return 0, errors.New("must not be negative")
	case s[0] == '+':
		s = s[1:]
	}
	if s == "" {
		return 0, errors.New(durationSyntax)
	}
	var total uint64
	for s != "" {
		// Number: digits, optionally "." and more digits, at least one digit.
		whole, rest, wholeDigits, overflow := leadingInt(s)
		s = rest
		var frac uint64
		scale := 1.0
		fracDigits := 0
		if s != "" && s[0] == '.' {
			frac, scale, s, fracDigits = leadingFraction(s[1:])
		}
		if wholeDigits+fracDigits == 0 {
			return 0, errors.New(durationSyntax)
		}
		// Unit: everything up to the next digit or dot.
		i := 0
		for i < len(s) && s[i] != '.' && (s[i] < '0' || s[i] > '9') {
			i++
		}
		u := s[:i]
		s = s[i:]
		if u == "" {
			return 0, errors.New(durationSyntax)
		}
		unit := durationUnit(u)
		if unit == 0 {
			return 0, fmt.Errorf("unknown unit %q: want ns, us, ms, s, m, h or d", u)
		}
		if overflow || whole > math.MaxInt64/unit {
			return 0, errors.New(durationTooLarge)
		}
		v := whole * unit
		if frac > 0 {
			// Rounds as time.ParseDuration does; the fraction adds less than one unit.
			v += uint64(float64(frac) * (float64(unit) / scale))
			if v > math.MaxInt64 {
				return 0, errors.New(durationTooLarge)
			}
		}
		total += v
		if total > math.MaxInt64 {
			return 0, errors.New(durationTooLarge)
		}
	}
	return time.Duration(total), nil
}

// leadingInt consumes leading decimal digits. overflow reports a value above
// math.MaxInt64, after which the value is meaningless but digits are still
// consumed so that the unit can be checked.
func leadingInt(s string) (v uint64, rest string, digits int, overflow bool) {
	i := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		if overflow {
			continue
		}
		if v > (math.MaxInt64-9)/10 && v*10+uint64(s[i]-'0') > math.MaxInt64 {
			overflow = true
			continue
		}
		v = v*10 + uint64(s[i]-'0')
	}
	return v, s[i:], i, overflow
}

// leadingFraction consumes the digits after a decimal point and returns them
// as frac/scale. Digits beyond uint64 precision are consumed and dropped; the
// arithmetic follows time.ParseDuration so that both round alike.
func leadingFraction(s string) (frac uint64, scale float64, rest string, digits int) {
	scale = 1
	full := false
	i := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		if full {
			continue
		}
		if frac > math.MaxInt64/10 {
			full = true
			continue
		}
		y := frac*10 + uint64(s[i]-'0')
		if y > 1<<63 {
			full = true
			continue
		}
		frac = y
		scale *= 10
	}
	return frac, scale, s[i:], i
}

// FormatDuration renders d so that ParseDuration reads it back: whole days
// as "30d", anything else as time.Duration.String does ("90m0s", "1.5s", "0s").
func FormatDuration(d time.Duration) string {
	if d > 0 && d%Day == 0 {
		return fmt.Sprintf("%dd", d/Day)
	}
	return d.String()
}

// Duration is a pflag.Value that parses with ParseDuration.
type Duration struct{ p *time.Duration }

// NewDuration stores def in *p and returns a flag value that sets *p.
func NewDuration(p *time.Duration, def time.Duration) *Duration {
	*p = def
	return &Duration{p: p}
}

// String returns FormatDuration of the current value.
func (v *Duration) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return FormatDuration(*v.p)
}

// Set replaces the value with ParseDuration(s); on error it is unchanged.
func (v *Duration) Set(s string) error {
	d, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*v.p = d
	return nil
}

// Type names the value in help output.
func (v *Duration) Type() string { return "duration" }
