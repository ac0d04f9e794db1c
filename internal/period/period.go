// Package period names the period of time an instant falls in, its hour,
// day, ISO week or month in a time zone, as a label that idem appends to a
// key: "once per day" then needs neither date(1) nor cron's \% escape.
//
// Every label names one span of real time, without gaps and never reused:
// a day is the zone's calendar day (23 or 25 hours long when clocks
// change), a week is an ISO 8601 week (Monday to Sunday, numbered in its
// ISO year, which may have 53), and an hour is an hour of real time. The
// wall-clock hour that clocks going back repeat is two periods: the second
// pass is labelled with a "b" after the hour (2026-11-01T01b).
//
// The zone data is compiled in (time/tzdata), so that a static build on a
// host or image without /usr/share/zoneinfo (the scratch image) knows
// every zone; the system's copy, when there is one, is read first.
package period

import (
	"fmt"
	"time"
	_ "time/tzdata" // every zone, in the scratch image too
)

// Unit is the length of a period.
type Unit int

// The units of --period.
const (
	Hour Unit = iota + 1
	Day
	Week
	Month
)

// Units lists the units' names, in the order help text gives them.
const Units = "hour, day, week or month"

// String is the unit's name, as --period takes it.
func (u Unit) String() string {
	switch u {
	case Hour:
		return "hour"
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	}
	return fmt.Sprintf("Unit(%d)", int(u))
}

// ParseUnit returns the unit named s (hour, day, week, month), or an error
// that names them.
func ParseUnit(s string) (Unit, error) {
	for u := Hour; u <= Month; u++ {
		if u.String() == s {
			return u, nil
		}
	}
	return 0, fmt.Errorf("unknown period %q: use %s", s, Units)
}

// Label returns the label of the period of unit u that t falls in, in t's
// location: 2026-12-03T14 (hour), 2026-12-03 (day), 2026-W49 (ISO week),
// 2026-12 (month). Each is a valid part of a key.
func Label(u Unit, t time.Time) string {
	if u == Hour {
		l := wall(Hour, t)
		if secondHour(t) {
			// Its wall-clock name was taken by the pass before the
			// clocks went back: a real hour is a period of its own.
			l += "b"
		}
		return l
	}
	l := wall(u, t)
	if repeated(t) {
		// Clocks went back across a boundary of u (a zone that goes
		// back at 00:30 repeats the end of the day before): the period
		// already begun goes on, so that no label comes back.
		if before := wall(u, transition(t).Add(-time.Nanosecond)); before > l {
			l = before
		}
	}
	return l
}

// wall is the label of t's wall-clock reading alone. Labels of one unit
// sort as their periods follow each other.
func wall(u Unit, t time.Time) string {
	switch u {
	case Hour:
		return t.Format("2006-01-02T15")
	case Week:
		y, w := t.ISOWeek()
		return fmt.Sprintf("%04d-W%02d", y, w)
	case Month:
		return t.Format("2006-01")
	}
	return t.Format("2006-01-02")
}

// transition is the start of the span of t's location in which t's offset
// holds (zero when the location has no transitions).
func transition(t time.Time) time.Time {
	start, _ := t.ZoneBounds()
	return start
}

// repeated reports whether t's wall-clock reading came before at another
// offset: the clocks went back at the start of t's zone span, and t is
// within the time they went back by.
func repeated(t time.Time) bool {
	start := transition(t)
	if start.IsZero() {
		return false
	}
	_, before := start.Add(-time.Nanosecond).Zone()
	_, now := t.Zone()
	back := time.Duration(before-now) * time.Second
	return back > 0 && t.Before(start.Add(back))
}

// secondHour reports whether t's wall-clock hour was also an hour at the
// offset before the clocks last went back: its first hour had that
// offset, so this one is a second pass, whole, even past the part the
// clocks repeated (St. John's went back from 00:01 to 23:01, so its hour
// 00 came at two offsets).
func secondHour(t time.Time) bool {
	start := transition(t)
	if start.IsZero() {
		return false
	}
	prev := start.Add(-time.Nanosecond)
	_, before := prev.Zone()
	_, now := t.Zone()
	if before <= now {
		return false
	}
	hour := time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), 0, 0, 0, time.UTC)
	last := time.Date(prev.Year(), prev.Month(), prev.Day(), prev.Hour(), prev.Minute(), prev.Second(), prev.Nanosecond(), time.UTC)
	return !hour.After(last)
}

// Location returns the zone named name ("Europe/Berlin", "UTC", "Local"),
// from the system's zone data or, without it, idem's own copy.
func Location(name string) (*time.Location, error) {
	if name == "" {
		return nil, fmt.Errorf("empty zone name")
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("zone %q: %w", name, err)
	}
	return loc, nil
}
