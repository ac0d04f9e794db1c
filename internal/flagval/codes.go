package flagval

import (
	"fmt"
	"strconv"
	"strings"
)

// CodeSet is a set of process exit codes 0-255. The zero value is empty.
// It is a comparable value type: copy it freely and compare with ==.
type CodeSet [4]uint64

// CodesOf returns the set of the given codes. It is meant for defaults in
// code and panics on a code outside 0-255, which is a programming error.
func CodesOf(codes ...int) CodeSet {
	var c CodeSet
	for _, code := range codes {
		if code < 0 || code > 255 {
			panic(fmt.Sprintf("flagval.CodesOf: exit code %d outside 0-255", code))
		}
		c.add(code)
	}
	return c
}

// ParseCodes parses a comma-separated list of exit codes and inclusive
// ranges, such as "0", "75" or "75,100-110". Spaces around items and around
// a range's dash are allowed. Empty items, signs, codes outside 0-255,
// reversed ranges ("110-100") and anything else are rejected with an error
// that quotes s and states the rule.
func ParseCodes(s string) (CodeSet, error) {
	var c CodeSet
	for item := range strings.SplitSeq(s, ",") {
		lo, hi, ok := parseCodeRange(item)
		if !ok {
			return CodeSet{}, fmt.Errorf("invalid exit code list %q: want codes 0-255 as a list or ranges, e.g. 75,100-110", s)
		}
		for code := lo; code <= hi; code++ {
			c.add(code)
		}
	}
	return c, nil
}

// parseCodeRange parses "N" or "A-B" with optional surrounding spaces.
func parseCodeRange(item string) (lo, hi int, ok bool) {
	a, b, isRange := strings.Cut(item, "-")
	if lo, ok = parseCode(a); !ok {
		return 0, 0, false
	}
	if !isRange {
		return lo, lo, true
	}
	if hi, ok = parseCode(b); !ok || hi < lo {
		return 0, 0, false
	}
	return lo, hi, true
}

// parseCode parses decimal digits in 0-255, allowing surrounding spaces.
// It stops as soon as the value exceeds 255, so long inputs cannot overflow.
func parseCode(s string) (int, bool) {
	s = strings.Trim(s, " \t")
	if s == "" {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + int(ch-'0')
		if n > 255 {
			return 0, false
		}
	}
	return n, true
}

func (c *CodeSet) add(code int) { c[code>>6] |= 1 << (code & 63) }

// Contains reports whether code is in the set; it is false outside 0-255.
func (c CodeSet) Contains(code int) bool {
	if code < 0 || code > 255 {
		return false
	}
	return c[code>>6]&(1<<(code&63)) != 0
}

// String renders the set in canonical compact form, ascending, with runs of
// three or more as ranges: "0", "1,2", "75,100-110". The empty set is "".
// ParseCodes(c.String()) == c for every non-empty set.
func (c CodeSet) String() string {
	var b strings.Builder
	for code := 0; code <= 255; code++ {
		if !c.Contains(code) {
			continue
		}
		end := code
		for end < 255 && c.Contains(end+1) {
			end++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(code))
		switch {
		case end == code+1:
			b.WriteByte(',')
			b.WriteString(strconv.Itoa(end))
		case end > code+1:
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(end))
		}
		code = end
	}
	return b.String()
}

// Codes is a pflag.Value that parses an exit-code list into a CodeSet.
type Codes struct{ p *CodeSet }

// NewCodes stores def in *p and returns a flag value that sets *p.
func NewCodes(p *CodeSet, def CodeSet) *Codes {
	*p = def
	return &Codes{p: p}
}

// String returns the canonical form of the current set.
func (v *Codes) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return v.p.String()
}

// Set replaces the set with ParseCodes(s); on error the set is unchanged.
func (v *Codes) Set(s string) error {
	c, err := ParseCodes(s)
	if err != nil {
		return err
	}
	*v.p = c
	return nil
}

// Type names the value in help output.
func (v *Codes) Type() string { return "codes" }
