package cmd

import (
	"testing"
	"time"
)

func TestSpan(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0ms"},
		{12 * time.Millisecond, "12ms"},
		{999 * time.Millisecond, "999ms"},
		{1500 * time.Millisecond, "1.5s"},
		{59*time.Second + 940*time.Millisecond, "59.9s"},
		{time.Minute, "1m"},
		{4*time.Minute + 3*time.Second, "4m3s"},
		{59*time.Minute + 59*time.Second + 600*time.Millisecond, "60m"},
		{time.Hour, "1h"},
		{2*time.Hour + 5*time.Minute, "2h5m"},
		{47 * time.Hour, "47h"},
		{48 * time.Hour, "2d"},
		{76 * time.Hour, "3d4h"},
		{30 * 24 * time.Hour, "30d"},
	} {
		if got := span(tc.d); got != tc.want {
			t.Errorf("span(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestSize(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"}, {76242944, "72.7 MiB"}, {1 << 30, "1.0 GiB"},
	} {
		if got := size(tc.n); got != tc.want {
			t.Errorf("size(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
