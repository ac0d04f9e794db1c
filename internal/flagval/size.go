package flagval

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Binary size units. Every spelling of a unit is 1024-based: K, KB and KiB
// all mean KiB, as most users of --max-output expect.
const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

// sizeUnit returns the multiplier for a unit (case-insensitive), or 0 if
// the unit is unknown. No unit, or B, means bytes.
func sizeUnit(u string) int64 {
	for i := 0; i < len(u); i++ {
		if u[i] >= 0x80 { // ToLower would fold the Kelvin sign to k
			return 0
		}
	}
	switch strings.ToLower(u) {
	case "", "b":
		return 1
	case "k", "kb", "kib":
		return KiB
	case "m", "mb", "mib":
		return MiB
	case "g", "gb", "gib":
		return GiB
	}
	return 0
}

const sizeSyntax = "want a byte count with an optional unit B, K, M or G (1024-based), e.g. 1048576, 512K or 1.5MiB"

// ParseSize parses a byte size: a plain count ("1048576") or a number with a
// unit B, K/KB/KiB, M/MB/MiB or G/GB/GiB, case-insensitive, all 1024-based.
// Decimals are allowed with K, M and G ("1.5MiB") and are rounded down to
// whole bytes; spaces around the input and before the unit are ignored.
//
// It returns an error that quotes s for an empty or malformed value, an
// unknown unit, a negative value, a fraction of a byte, or a result above
// math.MaxInt64; it never wraps.
func ParseSize(s string) (int64, error) {
	n, err := parseSize(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: %w", s, err)
	}
	return n, nil
}

func parseSize(s string) (int64, error) {
	if strings.HasPrefix(s, "-") {
		return 0, errors.New("must not be negative")
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	whole := s[:i]
	var frac string
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		frac, i = s[i+1:j], j
	}
	if whole == "" && frac == "" {
		return 0, errors.New(sizeSyntax)
	}
	mult := sizeUnit(strings.TrimLeft(s[i:], " \t"))
	if mult == 0 {
		return 0, errors.New(sizeSyntax)
	}
	if mult == 1 && strings.Trim(frac, "0") != "" {
		return 0, errors.New("not a whole number of bytes")
	}

	var n int64
	for k := 0; k < len(whole); k++ {
		d := int64(whole[k] - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, errors.New("too large")
		}
		n = n*10 + d
	}
	if n > math.MaxInt64/mult {
		return 0, errors.New("too large")
	}
	n *= mult
	// floor(mult × 0.frac), exactly, from the last digit back:
	// floor((a + floor(x))/10) == floor((a + x)/10) for integer a.
	var part int64
	for k := len(frac) - 1; k >= 0; k-- {
		part = (int64(frac[k]-'0')*mult + part) / 10
	}
	if n > math.MaxInt64-part {
		return 0, errors.New("too large")
	}
	return n + part, nil
}

// FormatSize renders n so that ParseSize reads it back: the largest binary
// unit that divides it exactly ("16MiB", "1536KiB"), or bytes ("1000B", "0B").
func FormatSize(n int64) string {
	if n != 0 {
		for _, u := range []struct {
			size int64
			name string
		}{{GiB, "GiB"}, {MiB, "MiB"}, {KiB, "KiB"}} {
			if n%u.size == 0 {
				return strconv.FormatInt(n/u.size, 10) + u.name
			}
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// Size is a pflag.Value that parses a byte size with ParseSize.
type Size struct{ p *int64 }

// NewSize stores def in *p and returns a flag value that sets *p.
func NewSize(p *int64, def int64) *Size {
	*p = def
	return &Size{p: p}
}

// String returns FormatSize of the current value.
func (v *Size) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return FormatSize(*v.p)
}

// Set replaces the value with ParseSize(s); on error it is unchanged.
func (v *Size) Set(s string) error {
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	*v.p = n
	return nil
}

// Type names the value in help output.
func (v *Size) Type() string { return "size" }
