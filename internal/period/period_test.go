package period

import (
	"testing"
	"time"
)

func at(t *testing.T, zone, instant string) time.Time {
	t.Helper()
	loc, err := Location(zone)
	if err != nil {
		t.Fatal(err)
	}
	u, err := time.Parse(time.RFC3339, instant)
	if err != nil {
		t.Fatal(err)
	}
	return u.In(loc)
}

func TestLabel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		zone    string
		instant string // RFC 3339, any offset: the label is of the zone's reading
		unit    Unit
		want    string
	}{
		// New York: clocks go forward at 02:00 on 2026-03-08 and back at
		// 02:00 (to 01:00) on 2026-11-01.
		{"ny spring before", "America/New_York", "2026-03-08T06:59:59Z", Hour, "2026-03-08T01"},
		{"ny spring after: 02 never is", "America/New_York", "2026-03-08T07:00:00Z", Hour, "2026-03-08T03"},
		{"ny spring day of 23h", "America/New_York", "2026-03-09T03:59:59Z", Day, "2026-03-08"},
		{"ny fall first pass", "America/New_York", "2026-11-01T05:30:00Z", Hour, "2026-11-01T01"},
		{"ny fall first pass end", "America/New_York", "2026-11-01T05:59:59Z", Hour, "2026-11-01T01"},
		{"ny fall second pass", "America/New_York", "2026-11-01T06:00:00Z", Hour, "2026-11-01T01b"},
		{"ny fall second pass end", "America/New_York", "2026-11-01T06:59:59Z", Hour, "2026-11-01T01b"},
		{"ny fall after", "America/New_York", "2026-11-01T07:00:00Z", Hour, "2026-11-01T02"},
		{"ny fall day of 25h, start", "America/New_York", "2026-11-01T04:00:00Z", Day, "2026-11-01"},
		{"ny fall day of 25h, second pass", "America/New_York", "2026-11-01T06:30:00Z", Day, "2026-11-01"},
		{"ny fall day of 25h, end", "America/New_York", "2026-11-02T04:59:59Z", Day, "2026-11-01"},
		{"ny next day", "America/New_York", "2026-11-02T05:00:00Z", Day, "2026-11-02"},

		// Berlin: forward at 02:00 on 2026-03-29, back at 03:00 (to
		// 02:00) on 2026-10-25.
		{"berlin spring before", "Europe/Berlin", "2026-03-29T00:59:59Z", Hour, "2026-03-29T01"},
		{"berlin spring after", "Europe/Berlin", "2026-03-29T01:00:00Z", Hour, "2026-03-29T03"},
		{"berlin fall first pass", "Europe/Berlin", "2026-10-25T00:30:00Z", Hour, "2026-10-25T02"},
		{"berlin fall second pass", "Europe/Berlin", "2026-10-25T01:30:00Z", Hour, "2026-10-25T02b"},
		{"berlin fall after", "Europe/Berlin", "2026-10-25T02:00:00Z", Hour, "2026-10-25T03"},
		{"berlin fall day", "Europe/Berlin", "2026-10-25T01:30:00Z", Day, "2026-10-25"},
		{"berlin fall week", "Europe/Berlin", "2026-10-25T01:30:00Z", Week, "2026-W43"},

		// Lord Howe Island goes back by half an hour, 02:00 to 01:30,
		// on 2026-04-05: a first pass of a whole hour, a second of half.
		{"lord howe first pass", "Australia/Lord_Howe", "2026-04-04T14:59:59Z", Hour, "2026-04-05T01"},
		{"lord howe second pass", "Australia/Lord_Howe", "2026-04-04T15:00:00Z", Hour, "2026-04-05T01b"},
		{"lord howe second pass end", "Australia/Lord_Howe", "2026-04-04T15:29:59Z", Hour, "2026-04-05T01b"},
		{"lord howe after", "Australia/Lord_Howe", "2026-04-04T15:30:00Z", Hour, "2026-04-05T02"},

		// São Paulo went back at midnight, 2019-02-17 00:00 to 23:00 the
		// day before (a 25-hour 16th), and forward at midnight, 2018-11-04
		// 00:00 to 01:00 (a day without a midnight).
		{"sao paulo 25h day, first pass", "America/Sao_Paulo", "2019-02-17T01:30:00Z", Day, "2019-02-16"},
		{"sao paulo 25h day, second pass", "America/Sao_Paulo", "2019-02-17T02:30:00Z", Day, "2019-02-16"},
		{"sao paulo second pass hour", "America/Sao_Paulo", "2019-02-17T02:30:00Z", Hour, "2019-02-16T23b"},
		{"sao paulo next day", "America/Sao_Paulo", "2019-02-17T03:00:00Z", Day, "2019-02-17"},
		{"sao paulo no midnight, before", "America/Sao_Paulo", "2018-11-04T02:59:59Z", Day, "2018-11-03"},
		{"sao paulo no midnight, after", "America/Sao_Paulo", "2018-11-04T03:00:00Z", Day, "2018-11-04"},
		{"sao paulo no midnight, hour", "America/Sao_Paulo", "2018-11-04T03:00:00Z", Hour, "2018-11-04T01"},

		// St. John's went back from 00:01 to 23:01 on 2005-10-30: its
		// hour 00 came at two offsets (a minute, then a whole hour), and
		// the day already begun goes on through the repeated minutes.
		{"st johns first minute", "America/St_Johns", "2005-10-30T02:30:30Z", Hour, "2005-10-30T00"},
		{"st johns repeated 23", "America/St_Johns", "2005-10-30T02:45:00Z", Hour, "2005-10-29T23b"},
		{"st johns repeated 23, day", "America/St_Johns", "2005-10-30T02:45:00Z", Day, "2005-10-30"},
		{"st johns hour 00 again", "America/St_Johns", "2005-10-30T03:45:00Z", Hour, "2005-10-30T00b"},
		{"st johns after", "America/St_Johns", "2005-10-30T04:31:00Z", Hour, "2005-10-30T01"},

		// Troll goes back by two hours, 03:00 to 01:00, on 2026-10-25.
		{"troll first pass", "Antarctica/Troll", "2026-10-24T23:30:00Z", Hour, "2026-10-25T01"},
		{"troll second pass 01", "Antarctica/Troll", "2026-10-25T01:30:00Z", Hour, "2026-10-25T01b"},
		{"troll second pass 02", "Antarctica/Troll", "2026-10-25T02:30:00Z", Hour, "2026-10-25T02b"},
		{"troll after", "Antarctica/Troll", "2026-10-25T03:30:00Z", Hour, "2026-10-25T03"},

		// ISO weeks: 2026 has 53, and so had 2020; the ISO year is not
		// the calendar year at either end.
		{"week 53 of 2026", "UTC", "2026-12-31T12:00:00Z", Week, "2026-W53"},
		{"week 53 of 2026 in 2027", "UTC", "2027-01-03T23:59:59Z", Week, "2026-W53"},
		{"week 1 of 2027", "UTC", "2027-01-04T00:00:00Z", Week, "2027-W01"},
		{"week 53 of 2020", "UTC", "2021-01-03T12:00:00Z", Week, "2020-W53"},
		{"week 1 of 2025 in 2024", "UTC", "2024-12-30T00:00:00Z", Week, "2025-W01"},
		{"week 52 of 2024", "UTC", "2024-12-29T23:59:59Z", Week, "2024-W52"},
		{"week 49", "UTC", "2026-12-03T10:00:00Z", Week, "2026-W49"},

		// Year ends: the zone's reading decides.
		{"new year in berlin, day", "Europe/Berlin", "2026-12-31T23:30:00Z", Day, "2027-01-01"},
		{"new year in berlin, month", "Europe/Berlin", "2026-12-31T23:30:00Z", Month, "2027-01"},
		{"new year in berlin, hour", "Europe/Berlin", "2026-12-31T23:30:00Z", Hour, "2027-01-01T00"},
		{"not yet in utc, day", "UTC", "2026-12-31T23:30:00Z", Day, "2026-12-31"},
		{"not yet in utc, month", "UTC", "2026-12-31T23:30:00Z", Month, "2026-12"},
		{"not yet in new york", "America/New_York", "2027-01-01T04:59:59Z", Month, "2026-12"},
		{"an instant given with another offset", "Europe/Berlin", "2026-12-03T09:00:00-05:00", Hour, "2026-12-03T15"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			when := at(t, tc.zone, tc.instant)
			if got := Label(tc.unit, when); got != tc.want {
				t.Errorf("Label(%s, %s in %s = %s)=%q, want %q", tc.unit, tc.instant, tc.zone, when.Format(time.RFC3339), got, tc.want)
			}
		})
	}
}

// TestLabelSpans: in zones with the odd rules (half-hour and two-hour
// shifts, midnight changes, a skipped day, summer time below standard
// time), walking through the years minute by minute around every change
// of offset, each label names one unbroken span of real time, never
// comes back once left, and no period is longer than its unit allows:
// an hour, a day of at most 26 hours, a week of at most 7 days and 2
// hours, a month of at most 31 days and 2 hours.
func TestLabelSpans(t *testing.T) {
	zones := []string{"America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "America/Sao_Paulo",
		"Antarctica/Troll", "Pacific/Apia", "Europe/Dublin", "Africa/Casablanca", "America/Havana",
		"Asia/Gaza", "Pacific/Chatham", "America/St_Johns", "Asia/Kolkata"}
	longest := map[Unit]time.Duration{Hour: time.Hour, Day: 26 * time.Hour, Week: 7*24*time.Hour + 2*time.Hour,
		Month: 31*24*time.Hour + 2*time.Hour}
	const step = time.Minute
	for _, zone := range zones {
		t.Run(zone, func(t *testing.T) {
			loc, err := Location(zone)
			if err != nil {
				t.Fatal(err)
			}
			from := time.Date(2005, 1, 1, 0, 0, 0, 0, time.UTC)
			to := time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC)
			changes := 0
			for tr := from; tr.Before(to); {
				_, end := tr.In(loc).ZoneBounds()
				if end.IsZero() || !end.Before(to) {
					break
				}
				changes++
				for _, u := range []Unit{Hour, Day, Week, Month} {
					checkSpans(t, u, loc, end.Add(-30*time.Hour), end.Add(30*time.Hour), step, longest[u])
				}
				tr = end
			}
			if zone != "Asia/Kolkata" && changes == 0 {
				t.Errorf("no change of offset in %s from %s to %s", zone, from, to)
			}
		})
	}
}

// checkSpans walks [from, to) by step and checks the labels of unit u:
// each one unbroken, never back once left, no longer than max, and, but
// for hours (a second pass follows the hour after it), in sorted order.
func checkSpans(t *testing.T, u Unit, loc *time.Location, from, to time.Time, step, max time.Duration) {
	t.Helper()
	seen := map[string]bool{}
	cur, began := "", from
	for at := from; at.Before(to); at = at.Add(step) {
		l := Label(u, at.In(loc))
		if l == cur {
			if d := at.Sub(began); d >= max && cur != "" && began != from {
				t.Fatalf("%s %s: %s lasts %s at %s, over %s", loc, u, l, d+step, at.In(loc).Format(time.RFC3339), max)
			}
			continue
		}
		if seen[l] {
			t.Fatalf("%s %s: %s comes back at %s after %s", loc, u, l, at.In(loc).Format(time.RFC3339), cur)
		}
		if u != Hour && cur != "" && l < cur {
			t.Fatalf("%s %s: %s follows %s at %s: labels out of order", loc, u, l, cur, at.In(loc).Format(time.RFC3339))
		}
		seen[l], cur, began = true, l, at
	}
}

func TestParseUnit(t *testing.T) {
	for _, s := range []string{"hour", "day", "week", "month"} {
		u, err := ParseUnit(s)
		if err != nil || u.String() != s {
			t.Errorf("ParseUnit(%q)=%v, %v", s, u, err)
		}
	}
	for _, s := range []string{"", "Day", "days", "year", "minute"} {
		if _, err := ParseUnit(s); err == nil {
			t.Errorf("ParseUnit(%q) took it", s)
		}
	}
}

func TestLocation(t *testing.T) {
	for _, name := range []string{"UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Local"} {
		if _, err := Location(name); err != nil {
			t.Errorf("Location(%q): %v", name, err)
		}
	}
	for _, name := range []string{"", "Mars/Olympus", "../etc/passwd", "/etc/localtime", "Europe/berlin "} {
		if _, err := Location(name); err == nil {
			t.Errorf("Location(%q) took it", name)
		}
	}
}
