package flagval

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

var _ pflag.Value = (*Duration)(nil)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"+0", 0},
		{"0s", 0},
		{"0d", 0},
		{"30s", 30 * time.Second},
		{"500ms", 500 * time.Millisecond},
		{"1h30m", 90 * time.Minute},
		{"1d", Day},
		{"30d", 30 * Day},
		{"1d12h", 36 * time.Hour},
		{"1.5d", 36 * time.Hour},
		{".5d", 12 * time.Hour},
		{"2d3h4m5s6ms7us8ns", 2*Day + 3*time.Hour + 4*time.Minute + 5*time.Second + 6*time.Millisecond + 7*time.Microsecond + 8},
		{"1µs", time.Microsecond},
		{"1μs", time.Microsecond},
		{"1.5s", 1500 * time.Millisecond},
		{"1.000000000000000000001s", time.Second},
		{"+5m", 5 * time.Minute},
		{" 7d ", 7 * Day},
		{"1h1h", 2 * time.Hour},
		{"106751d", 106751 * Day},
		{"9223372036854775807ns", math.MaxInt64},
		{"2562047h47m16.854775807s", math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDuration(tt.in)
			if err != nil {
				t.Fatalf("ParseDuration(%q) error: %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseDuration(%q)=%v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

// Without a d unit, ParseDuration agrees with time.ParseDuration on every
// non-negative input the standard library accepts.
func TestParseDurationMatchesStdlib(t *testing.T) {
	for _, in := range []string{"1ns", "1.1us", "3.000000001s", "1.0000000000000000001h", "0.3333333333333333333h", "72h3m0.5s", "5.s", "2562047h47m16.854775807s"} {
		want, err := time.ParseDuration(in)
		if err != nil {
			t.Fatalf("time.ParseDuration(%q): %v", in, err)
		}
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q)=%v, %v; want %v", in, got, err, want)
		}
	}
}

func TestParseDurationErrors(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"", "want a number and a unit"},
		{"  ", "want a number and a unit"},
		{"+", "want a number and a unit"},
		{"30", "want a number and a unit"},
		{"00", "want a number and a unit"},
		{"1d12", "want a number and a unit"},
		{".", "want a number and a unit"},
		{".s", "want a number and a unit"},
		{"d", "want a number and a unit"},
		{"1.2.3s", "want a number and a unit"},
		{"-1s", "must not be negative"},
		{"-0", "must not be negative"},
		{"-1d", "must not be negative"},
		{"1s-1s", `unknown unit "s-"`},
		{"5x", `unknown unit "x"`},
		{"1w", `unknown unit "w"`},
		{"1D", `unknown unit "D"`},
		{"1d 12h", `unknown unit "d "`},
		{"1e3s", `unknown unit "e"`},
		{"300000000d", "too large"},
		{"106752d", "too large"},
		{"9223372036854775808ns", "too large"},
		{"99999999999999999999999s", "too large"},
		{"2562047h47m16.854775808s", "too large"},
		{"106751d106751d", "too large"},
		{"9223372036854775807ns1ns", "too large"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDuration(tt.in)
			if err == nil {
				t.Fatalf("ParseDuration(%q)=%v, want error", tt.in, got)
			}
			msg := err.Error()
			if prefix := "invalid duration " + strconv.Quote(tt.in) + ": "; !strings.HasPrefix(msg, prefix) {
				t.Fatalf("ParseDuration(%q) error %q, want prefix %q", tt.in, msg, prefix)
			}
			if !strings.Contains(msg, tt.want) {
				t.Fatalf("ParseDuration(%q) error %q, want it to contain %q", tt.in, msg, tt.want)
			}
		})
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{30 * time.Second, "30s"},
		{90 * time.Minute, "1h30m0s"},
		{Day, "1d"},
		{30 * Day, "30d"},
		{36 * time.Hour, "36h0m0s"},
		{1500 * time.Millisecond, "1.5s"},
		{math.MaxInt64, "2562047h47m16.854775807s"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := FormatDuration(tt.in); got != tt.want {
				t.Fatalf("FormatDuration(%v)=%q, want %q", tt.in, got, tt.want)
			}
			if back, err := ParseDuration(tt.want); err != nil || back != tt.in {
				t.Fatalf("ParseDuration(%q)=%v, %v; want %v", tt.want, back, err, tt.in)
			}
		})
	}
}

func TestDurationFlag(t *testing.T) {
	var olderThan, timeout time.Duration
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.Var(NewDuration(&olderThan, 30*Day), "older-than", "")
	fs.Var(NewDuration(&timeout, 0), "timeout", "")
	if got, want := fs.Lookup("older-than").DefValue, "30d"; got != want {
		t.Fatalf("DefValue=%q, want %q", got, want)
	}
	if got, want := fs.Lookup("timeout").DefValue, "0s"; got != want {
		t.Fatalf("DefValue=%q, want %q", got, want)
	}
	if err := fs.Parse([]string{"--older-than=1d12h", "--timeout", "90s"}); err != nil {
		t.Fatal(err)
	}
	if olderThan != 36*time.Hour || timeout != 90*time.Second {
		t.Fatalf("got older-than=%v timeout=%v, want 36h 90s", olderThan, timeout)
	}
	if err := fs.Parse([]string{"--timeout", "-1s"}); err == nil || !strings.Contains(err.Error(), "must not be negative") {
		t.Fatalf("Parse(-1s) err=%v, want must not be negative", err)
	}
	if timeout != 90*time.Second {
		t.Fatalf("after failed Set timeout=%v, want unchanged 90s", timeout)
	}
	if got, want := fs.Lookup("timeout").Value.Type(), "duration"; got != want {
		t.Fatalf("Type()=%q, want %q", got, want)
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"0", "30s", "1d12h", "1.5d", "300000000d", "-1s", "2562047h47m16.854775807s", "1µs", ".5d", "5x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			if d != 0 {
				t.Fatalf("ParseDuration(%q)=%v with error", s, d)
			}
			return
		}
		if d < 0 {
			t.Fatalf("ParseDuration(%q)=%v, want non-negative", s, d)
		}
		str := FormatDuration(d)
		if back, err := ParseDuration(str); err != nil || back != d {
			t.Fatalf("round trip of %q via %q: got %v, %v; want %v", s, str, back, err, d)
		}
		// Where the standard library accepts the input, both agree.
		if !strings.Contains(s, "d") {
			if want, err := time.ParseDuration(strings.TrimSpace(s)); err == nil && want != d {
				t.Fatalf("ParseDuration(%q)=%v, time.ParseDuration=%v", s, d, want)
			}
		}
	})
}
