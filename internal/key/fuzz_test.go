package key

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// partList decodes a fuzz string into a part list: the first byte is the
// separator and the rest is split on it; "" is the empty list. Every part list
// that leaves some byte unused is reachable.
func partList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s[1:], s[:1])
}

func FuzzBuild(f *testing.F) {
	f.Add("|evt|release-42|notify", "|evt:release-42|notify")
	f.Add("|a:b", "|a|b")
	f.Add("|a b", "|a_b")
	f.Add("", "|")
	f.Add("|", "||")
	f.Add("|caf\u00e9", "|caf\u00e8")
	f.Add("|a\xff", "|a\xfe")
	f.Add("|"+strings.Repeat("a", 200), "|"+strings.Repeat("a", 201))
	f.Fuzz(func(t *testing.T, a, b string) {
		pa, pb := partList(a), partList(b)
		ka, kb := Build(pa...), Build(pb...)
		for _, c := range []struct {
			parts []string
			key   string
		}{{pa, ka}, {pb, kb}, {[]string{a, b}, Build(a, b)}} {
			if err := Validate(c.key); err != nil {
				t.Fatalf("Build(%q)=%q: %v", c.parts, c.key, err)
			}
			if len(c.parts) > 0 && !slices.Contains(c.parts, "") {
				if err := CheckParts(c.key); err != nil {
					t.Fatalf("Build(%q)=%q: %v", c.parts, c.key, err)
				}
			}
			if !strings.Contains(c.key, hashSep) && !slices.Equal(strings.Split(c.key, ":"), c.parts) {
				t.Fatalf("Build(%q)=%q has no hash but does not split back into its parts", c.parts, c.key)
			}
		}
		if again := Build(pa...); again != ka {
			t.Fatalf("Build(%q) not deterministic: %q then %q", pa, ka, again)
		}
		if (ka == kb) != slices.Equal(pa, pb) {
			t.Fatalf("Build(%q)=%q, Build(%q)=%q", pa, ka, pb, kb)
		}
	})
}

func FuzzValidate(f *testing.F) {
	f.Add("evt:release-42:notify")
	f.Add("")
	f.Add("ab")
	f.Add("ab c:defgh")
	f.Add("caf\u00e9-latte")
	f.Add("abcdefgh\n\x1b[31m")
	f.Add(strings.Repeat("a", 128))
	f.Add(strings.Repeat("a", 129))
	f.Fuzz(func(t *testing.T, k string) {
		err := Validate(k)
		ok := len(k) >= MinLen && len(k) <= MaxLen
		for i := 0; i < len(k); i++ {
			ok = ok && strings.IndexByte(alphabet, k[i]) >= 0
		}
		if (err == nil) != ok {
			t.Fatalf("Validate(%q)=%v, want valid=%v", k, err, ok)
		}
		if err == nil {
			return
		}
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Key != k || ie.Reason == "" {
			t.Fatalf("Validate(%q)=%#v, want *InvalidError with Key and Reason", k, err)
		}
		msg := err.Error()
		for _, r := range msg {
			if r < ' ' || r >= utf8.RuneSelf || r == 0x7f {
				t.Fatalf("message %q has a non-printable or non-ASCII character %q", msg, r)
			}
		}
		if len(msg) > 400 {
			t.Fatalf("message is %d bytes, want a short one: %q", len(msg), msg)
		}
	})
}
