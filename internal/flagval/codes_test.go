package flagval

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

var _ pflag.Value = (*Codes)(nil)

func TestParseCodes(t *testing.T) {
	tests := []struct {
		in   string
		want CodeSet
		str  string // canonical String()
	}{
		{"0", CodesOf(0), "0"},
		{"75", CodesOf(75), "75"},
		{"255", CodesOf(255), "255"},
		{"075", CodesOf(75), "75"},
		{"1,2", CodesOf(1, 2), "1,2"},
		{"2,1,2", CodesOf(1, 2), "1,2"},
		{" 1, 2 ", CodesOf(1, 2), "1,2"},
		{"\t3 ,\t4", CodesOf(3, 4), "3,4"},
		{"75,100-110", CodesOf(75, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110), "75,100-110"},
		{"100 - 102", CodesOf(100, 101, 102), "100-102"},
		{"5-5", CodesOf(5), "5"},
		{"1-3,2-4", CodesOf(1, 2, 3, 4), "1-4"},
		{"63-65", CodesOf(63, 64, 65), "63-65"},
		{"0-255", allCodes(), "0-255"},
		{"254,255,0", CodesOf(0, 254, 255), "0,254,255"},
		{"0000000000000000000000000000075", CodesOf(75), "75"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseCodes(tt.in)
			if err != nil {
				t.Fatalf("ParseCodes(%q) error: %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseCodes(%q)=%v, want %v", tt.in, got, tt.want)
			}
			if got, want := got.String(), tt.str; got != want {
				t.Fatalf("ParseCodes(%q).String()=%q, want %q", tt.in, got, want)
			}
		})
	}
}

func TestParseCodesErrors(t *testing.T) {
	for _, in := range []string{
		"", " ", ",", "1,", ",1", "1,,2", "1, ,2",
		"-1", "+1", "256", "1000", "99999999999999999999", "1-256",
		"110-100", "1-", "-", "1--2", "1-2-3", "--1",
		"x", "1x", "0x4b", "1.0", "1 2", "1;2", "१", "７５",
	} {
		t.Run(in, func(t *testing.T) {
			got, err := ParseCodes(in)
			if err == nil {
				t.Fatalf("ParseCodes(%q)=%v, want error", in, got)
			}
			want := `invalid exit code list "` // quoted with %q
			if msg := err.Error(); !strings.HasPrefix(msg, want) || !strings.HasSuffix(msg, `: want codes 0-255 as a list or ranges, e.g. 75,100-110`) {
				t.Fatalf("ParseCodes(%q) error %q, want the rule", in, msg)
			}
			if got != (CodeSet{}) {
				t.Fatalf("ParseCodes(%q) returned non-empty set %v with error", in, got)
			}
		})
	}
}

func TestCodeSetContains(t *testing.T) {
	c := CodesOf(0, 63, 64, 75, 255)
	tests := []struct {
		code int
		want bool
	}{
		{0, true}, {1, false}, {63, true}, {64, true}, {65, false}, {75, true},
		{254, false}, {255, true}, {256, false}, {-1, false}, {-256, false}, {1 << 40, false},
	}
	for _, tt := range tests {
		if got := c.Contains(tt.code); got != tt.want {
			t.Errorf("Contains(%d)=%v, want %v", tt.code, got, tt.want)
		}
	}
	if (CodeSet{}).Contains(0) {
		t.Errorf("empty set contains 0")
	}
}

func TestCodesOfPanics(t *testing.T) {
	for _, code := range []int{-1, 256} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("CodesOf(%d) did not panic", code)
				}
			}()
			CodesOf(code)
		}()
	}
}

func TestCodeSetStringEmpty(t *testing.T) {
	if got := (CodeSet{}).String(); got != "" {
		t.Fatalf("empty String()=%q, want \"\"", got)
	}
}

func TestCodesFlag(t *testing.T) {
	var success, transient CodeSet
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.Var(NewCodes(&success, CodesOf(0)), "success-codes", "")
	fs.Var(NewCodes(&transient, CodesOf(75)), "transient-codes", "")
	if got, want := transient, CodesOf(75); got != want {
		t.Fatalf("default=%v, want %v", got, want)
	}
	if got, want := fs.Lookup("transient-codes").DefValue, "75"; got != want {
		t.Fatalf("DefValue=%q, want %q", got, want)
	}
	if err := fs.Parse([]string{"--transient-codes", "75,100-110", "--success-codes=0,1"}); err != nil {
		t.Fatal(err)
	}
	if got, want := transient.String(), "75,100-110"; got != want {
		t.Fatalf("transient=%q, want %q", got, want)
	}
	if got, want := success, CodesOf(0, 1); got != want {
		t.Fatalf("success=%v, want %v", got, want)
	}
	if got, want := fs.Lookup("success-codes").Value.Type(), "codes"; got != want {
		t.Fatalf("Type()=%q, want %q", got, want)
	}

	err := fs.Parse([]string{"--transient-codes", "110-100"})
	if err == nil || !strings.Contains(err.Error(), `invalid exit code list "110-100"`) {
		t.Fatalf("Parse bad value: err=%v, want invalid exit code list", err)
	}
	if got, want := transient.String(), "75,100-110"; got != want {
		t.Fatalf("after failed Set transient=%q, want unchanged %q", got, want)
	}
	var zero *Codes
	if got := zero.String(); got != "" {
		t.Fatalf("nil Codes String()=%q, want \"\"", got)
	}
}

func allCodes() CodeSet {
	var c CodeSet
	for i := range 256 {
		c = c.with(i)
	}
	return c
}

func (c CodeSet) with(code int) CodeSet { c.add(code); return c }

func FuzzParseCodes(f *testing.F) {
	for _, s := range []string{"0", "75", "75,100-110", " 1, 2 ", "110-100", "1,,2", "99999999999999999999", "0-255"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCodes(s)
		if err != nil {
			if c != (CodeSet{}) {
				t.Fatalf("ParseCodes(%q) returned %v with error", s, c)
			}
			return
		}
		if c == (CodeSet{}) {
			t.Fatalf("ParseCodes(%q) succeeded with an empty set", s)
		}
		str := c.String()
		back, err := ParseCodes(str)
		if err != nil {
			t.Fatalf("ParseCodes(%q).String()=%q does not parse: %v", s, str, err)
		}
		if back != c {
			t.Fatalf("round trip of %q via %q: got %v, want %v", s, str, back, c)
		}
		if back.String() != str {
			t.Fatalf("String() not canonical: %q then %q", str, back.String())
		}
	})
}

func BenchmarkParseCodes(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseCodes("75,100-110, 120"); err != nil {
			b.Fatal(err)
		}
	}
}
