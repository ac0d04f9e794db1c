package flagval

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

var _ pflag.Value = (*Size)(nil)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1048576", 1 << 20},
		{"1000B", 1000},
		{"1000b", 1000},
		{"1.0", 1},
		{"1k", 1024},
		{"1K", 1024},
		{"1KB", 1024},
		{"1KiB", 1024},
		{"1kib", 1024},
		{"16M", 16 << 20},
		{"16MB", 16 << 20},
		{"16MiB", 16 << 20},
		{"1.5MiB", 3 << 19},
		{".5K", 512},
		{"2.K", 2048},
		{"1G", 1 << 30},
		{"1GB", 1 << 30},
		{"8GiB", 8 << 30},
		{"0.1K", 102},    // 102.4 rounds down
		{"0.999K", 1022}, // 1022.976
		{"16 MiB", 16 << 20},
		{"  512K\t", 512 << 10},
		{"0.0000000009313225746154785156250G", 1},  // exactly 2^-30 GiB
		{"0.0000000009313225746154785156249G", 0},  // just under one byte
		{"1.00000000000000000000000000001K", 1024}, // digits past any float precision
		{"8589934591.999999999999999999999G", math.MaxInt64},
		{"9223372036854775807", math.MaxInt64},
		{"9223372036854775807B", math.MaxInt64},
		{"00000000000000000000000000001K", 1024},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if err != nil {
				t.Fatalf("ParseSize(%q) error: %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseSize(%q)=%d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseSizeErrors(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"", "want a byte count"},
		{" ", "want a byte count"},
		{"K", "want a byte count"},
		{".", "want a byte count"},
		{".K", "want a byte count"},
		{"+1", "want a byte count"},
		{"1e6", "want a byte count"},
		{"0x10", "want a byte count"},
		{"1,024", "want a byte count"},
		{"1 2K", "want a byte count"},
		{"1.2.3K", "want a byte count"},
		{"1T", "want a byte count"},
		{"1KK", "want a byte count"},
		{"1\u212a", "want a byte count"}, // Kelvin sign is not k
		{"1 K B", "want a byte count"},
		{"-1", "must not be negative"},
		{"-1K", "must not be negative"},
		{"1.5", "not a whole number of bytes"},
		{"1.5B", "not a whole number of bytes"},
		{"9223372036854775808", "too large"},
		{"99999999999999999999999999", "too large"},
		{"8589934592G", "too large"},
		{"8589934592.0G", "too large"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if err == nil {
				t.Fatalf("ParseSize(%q)=%d, want error", tt.in, got)
			}
			msg := err.Error()
			if prefix := "invalid size " + strconv.Quote(tt.in) + ": "; !strings.HasPrefix(msg, prefix) {
				t.Fatalf("ParseSize(%q) error %q, want prefix %q", tt.in, msg, prefix)
			}
			if !strings.Contains(msg, tt.want) {
				t.Fatalf("ParseSize(%q) error %q, want it to contain %q", tt.in, msg, tt.want)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0B"},
		{1, "1B"},
		{1000, "1000B"},
		{1024, "1KiB"},
		{1536 << 10, "1536KiB"},
		{16 << 20, "16MiB"},
		{3 << 19, "1536KiB"},
		{1 << 30, "1GiB"},
		{5 << 30, "5GiB"},
		{math.MaxInt64, "9223372036854775807B"},
		{math.MaxInt64 - (1<<30 - 1), "8589934591GiB"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := FormatSize(tt.in); got != tt.want {
				t.Fatalf("FormatSize(%d)=%q, want %q", tt.in, got, tt.want)
			}
			if back, err := ParseSize(tt.want); err != nil || back != tt.in {
				t.Fatalf("ParseSize(%q)=%d, %v; want %d", tt.want, back, err, tt.in)
			}
		})
	}
}

func TestSizeFlag(t *testing.T) {
	var maxOutput int64
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.Var(NewSize(&maxOutput, 16*MiB), "max-output", "")
	if got, want := fs.Lookup("max-output").DefValue, "16MiB"; got != want {
		t.Fatalf("DefValue=%q, want %q", got, want)
	}
	if err := fs.Parse([]string{"--max-output", "1.5M"}); err != nil {
		t.Fatal(err)
	}
	if got, want := maxOutput, int64(3<<19); got != want {
		t.Fatalf("max-output=%d, want %d", got, want)
	}
	if err := fs.Parse([]string{"--max-output=-1"}); err == nil || !strings.Contains(err.Error(), `invalid size "-1": must not be negative`) {
		t.Fatalf("Parse(-1) err=%v, want invalid size", err)
	}
	if got, want := maxOutput, int64(3<<19); got != want {
		t.Fatalf("after failed Set max-output=%d, want unchanged %d", got, want)
	}
	if got, want := fs.Lookup("max-output").Value.Type(), "size"; got != want {
		t.Fatalf("Type()=%q, want %q", got, want)
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "1048576", "16MiB", "1.5MiB", "512k", "1G", "-1", "1.5", "9223372036854775808", "8589934591.999999999999999999999G", "1 KB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			if n != 0 {
				t.Fatalf("ParseSize(%q)=%d with error", s, n)
			}
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q)=%d, want non-negative", s, n)
		}
		str := FormatSize(n)
		if back, err := ParseSize(str); err != nil || back != n {
			t.Fatalf("round trip of %q via %q: got %d, %v; want %d", s, str, back, err, n)
		}
		// A plain integer means bytes, exactly as strconv reads it.
		if v, err := strconv.ParseInt(s, 10, 64); err == nil && v >= 0 && v != n {
			t.Fatalf("ParseSize(%q)=%d, strconv says %d", s, n, v)
		}
	})
}

func BenchmarkParseSize(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseSize("1.5MiB"); err != nil {
			b.Fatal(err)
		}
	}
}
