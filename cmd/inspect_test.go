package cmd

import (
	"testing"
	"time"
)

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 17, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"30m", now.Add(-30 * time.Minute)},
		{"2d", now.Add(-48 * time.Hour)},
		{"1d12h", now.Add(-36 * time.Hour)},
		{"2026-12-01T00:00:00Z", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{"2026-12-01T02:00:00+02:00", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
	} {
		got, err := parseSince(tc.in, now)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "yesterday", "-1h", "2026-12-01"} {
		if _, err := parseSince(bad, now); err == nil {
			t.Errorf("parseSince(%q): no error", bad)
		}
	}
}
