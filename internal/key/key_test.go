package key

import (
	"errors"
	"strings"
	"testing"
)

// alphabet is the key rule spelled out, to check the masks against.
const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789:_-."

func TestAllowedMatchesAlphabet(t *testing.T) {
	for c := 0; c < 256; c++ {
		if got, want := allowed(byte(c)), strings.IndexByte(alphabet, byte(c)) >= 0; got != want {
			t.Errorf("allowed(%q)=%v, want %v", byte(c), got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		key    string
		reason string // "" means valid
	}{
		{"event", "evt:release-42:notify", ""},
		{"date", "backup:2026-12-02", ""},
		{"min length", "abcdefgh", ""},
		{"max length", strings.Repeat("a", 128), ""},
		{"all characters", alphabet, ""},
		{"empty", "", "got 0"},
		{"short", "ab", "got 2"},
		{"too long", strings.Repeat("a", 129), "got 129"},
		{"space", "ab c:defgh", "byte 3 is ' '"},
		{"slash", "backup/2026-12-02", "byte 7 is '/'"},
		{"newline", "abcdefgh\n", "byte 9 is '\\n'"},
		{"nul", "abcd\x00efgh", "byte 5 is '\\x00'"},
		{"non-ASCII", "caf\u00e9-latte", "byte 4 is 0xc3 (non-ASCII)"},
		{"short and bad", "a b", "got 3; byte 2 is ' '"},
		{"tilde", "abcdefgh~", "byte 9 is '~'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.key)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("Validate(%q)=%v, want nil", tt.key, err)
				}
				return
			}
			var ie *InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("Validate(%q)=%v, want *InvalidError", tt.key, err)
			}
			if got, want := ie.Reason, tt.reason; got != want {
				t.Errorf("Reason=%q, want %q", got, want)
			}
			if ie.Key != tt.key {
				t.Errorf("Key=%q, want %q", ie.Key, tt.key)
			}
		})
	}
}

func TestInvalidErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		key  string
		want string
	}{
		{"short", "ab", `invalid key "ab": must be 8-128 characters of letters, digits, ':', '_', '-', '.' (got 2)`},
		{"space", "ab c:defgh", `invalid key "ab c:defgh": must be 8-128 characters of letters, digits, ':', '_', '-', '.' (byte 3 is ' ')`},
		{"escaped", "line\none\x1b[31m", `invalid key "line\none\x1b[31m": must be 8-128 characters of letters, digits, ':', '_', '-', '.' (byte 5 is '\n')`},
		{"unicode", "caf\u00e9-latte", `invalid key "caf\u00e9-latte": must be 8-128 characters of letters, digits, ':', '_', '-', '.' (byte 4 is 0xc3 (non-ASCII))`},
		{"huge", strings.Repeat("x", 40) + strings.Repeat("y", 1000), `invalid key "` + strings.Repeat("x", 40) + `"...(1040 bytes): must be 8-128 characters of letters, digits, ':', '_', '-', '.' (got 1040)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Validate(tt.key).Error(); got != tt.want {
				t.Fatalf("message\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestBuild(t *testing.T) {
	tests := []struct {
		name  string
		parts []string
		want  string // exact key; "" to check only the shape
		plain bool   // want the joined parts with no hash
	}{
		{"plain", []string{"evt", "release-42", "notify"}, "evt:release-42:notify", true},
		{"one part", []string{"backup-2026-12-02"}, "backup-2026-12-02", true},
		{"exactly 8", []string{"abc", "defg"}, "abc:defg", true},
		{"exactly 128", []string{strings.Repeat("a", 128)}, strings.Repeat("a", 128), true},
		{"space mapped", []string{"deploy", "my app"}, "", false},
		{"rune mapped once", []string{"caf\u00e9", "order"}, "", false},
		{"colon in part", []string{"evt:release-42"}, "", false},
		{"empty part", []string{"release-42", ""}, "", false},
		{"no parts", nil, "", false},
		{"short", []string{"ab"}, "", false},
		{"long", []string{strings.Repeat("a", 129)}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Build(tt.parts...)
			if err := Validate(got); err != nil {
				t.Fatalf("Build(%q)=%q: %v", tt.parts, got, err)
			}
			if again := Build(tt.parts...); again != got {
				t.Fatalf("Build(%q) not deterministic: %q then %q", tt.parts, got, again)
			}
			if tt.want != "" && got != tt.want {
				t.Fatalf("Build(%q)=%q, want %q", tt.parts, got, tt.want)
			}
			if hashed := strings.Contains(got, hashSep); hashed == tt.plain {
				t.Fatalf("Build(%q)=%q: hashed=%v, want %v", tt.parts, got, hashed, !tt.plain)
			}
		})
	}
}

func TestBuildReadablePrefix(t *testing.T) {
	tests := []struct {
		name   string
		parts  []string
		prefix string
	}{
		{"mapped", []string{"deploy", "my app"}, "deploy:my_app::"},
		{"whole rune", []string{"caf\u00e9", "order"}, "caf_:order::"},
		{"invalid utf-8 bytes", []string{"a\xff\xfeb"}, "a__b::"},
		{"colon kept", []string{"evt:release-42"}, "evt:release-42::"},
		{"short", []string{"ab"}, "ab::"},
		{"no parts", nil, "::"},
		{"empty part", []string{""}, "::"},
		{"long", []string{strings.Repeat("a", 200)}, strings.Repeat("a", prefixMax) + "::"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Build(tt.parts...)
			if !strings.HasPrefix(got, tt.prefix) || len(got) != len(tt.prefix)+hashLen {
				t.Fatalf("Build(%q)=%q, want %q followed by %d hex digits", tt.parts, got, tt.prefix, hashLen)
			}
			if len(got) > MaxLen {
				t.Fatalf("Build(%q) is %d bytes, want <= %d", tt.parts, len(got), MaxLen)
			}
		})
	}
}

// TestBuildGolden pins the hash so that keys stay stable across releases:
// changing the algorithm would silently orphan every recorded key.
func TestBuildGolden(t *testing.T) {
	// Computed independently of partsHash, from the algorithm in Build's doc.
	const goldenHash = "1343537dba3dd891"
	if got, want := Build("deploy", "my app"), "deploy:my_app::"+goldenHash; got != want {
		t.Fatalf("Build(deploy, my app)=%q, want %q", got, want)
	}
}

func TestBuildDistinct(t *testing.T) {
	lists := [][]string{
		nil,
		{""},
		{"", ""},
		{"a:b"},
		{"a", "b"},
		{"a b"},
		{"a_b"},
		{"a\u00e9"},
		{"a\u00e8"},
		{"a_"},
		{"release-42", "notify"},
		{"release-42:notify"},
		{"release-42", "notify", ""},
		{"release-42::notify"},
		{"release-42", "", "notify"},
		{"abcdefgh"},
		{"abcdefgh::0123456789abcdef"},
		{strings.Repeat("a", 200)},
		{strings.Repeat("a", 201)},
		{strings.Repeat("a", 110), "b"},
		{strings.Repeat("a", 110), "c"},
	}
	// A plain key that looks like a hashed one must still differ from it.
	h := Build("a b")
	lists = append(lists, []string{"a_b", h[len("a_b::"):]}, []string{h})
	seen := map[string][]string{}
	for _, l := range lists {
		k := Build(l...)
		if prev, ok := seen[k]; ok {
			t.Errorf("Build(%q) = Build(%q) = %q", l, prev, k)
		}
		seen[k] = l
	}
}

func BenchmarkValidate(b *testing.B) {
	k := "evt:release-2026-12-02:notify-slack.channel_ops"
	b.SetBytes(int64(len(k)))
	for b.Loop() {
		if err := Validate(k); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidateMax(b *testing.B) {
	k := strings.Repeat("aZ0:_-.9", MaxLen/8)
	b.SetBytes(int64(len(k)))
	for b.Loop() {
		if err := Validate(k); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBuild(b *testing.B) {
	for b.Loop() {
		Build("evt", "release 42", "notify")
	}
}
