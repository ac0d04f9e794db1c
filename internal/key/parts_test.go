package key

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckParts(t *testing.T) {
	tests := []struct {
		name    string
		key     string
		problem string // "" means accepted
	}{
		{"plain", "deploy:prod:abc123", ""},
		{"no colon", "backup-2026-12-02", ""},
		{"hashed", "deploy:my_app::1343537dba3dd891", ""},
		{"dots in a part", "release:v1.2.3", ""},
		{"unset last variable", "deploy:prod:", "ends with ':' (its last part is empty)"},
		{"unset first variable", ":prod:abc123", "starts with ':' (its first part is empty)"},
		{"unset middle variable", "deploy::abc123", "has '::' at byte 7 (an empty part)"},
		{"two unset", "backup::", "ends with ':' (its last part is empty)"},
		{"only dots", "........", "has no letter or digit"},
		{"only dashes", "--------", "has no letter or digit"},
		{"colon before the hash", "deploy:::1343537dba3dd891", "ends with ':' (its last part is empty)"},
		{"nothing before the hash", "::1343537dba3dd891", "starts with ':' (its first part is empty)"},
		{"hash with upper case is no hash", "deploy::1343537DBA3DD891", "has '::' at byte 7 (an empty part)"},
		{"short hash is no hash", "deploy::1343537dba3dd89", "has '::' at byte 7 (an empty part)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := Validate(tt.key); err != nil {
				t.Fatalf("test key %q is invalid: %v", tt.key, err)
			}
			err := CheckParts(tt.key)
			if tt.problem == "" {
				if err != nil {
					t.Fatalf("CheckParts(%q)=%v, want nil", tt.key, err)
				}
				return
			}
			var e *EmptyPartError
			if !errors.As(err, &e) {
				t.Fatalf("CheckParts(%q)=%v, want *EmptyPartError", tt.key, err)
			}
			if e.Problem != tt.problem || e.Key != tt.key {
				t.Fatalf("CheckParts(%q)=%+v, want problem %q", tt.key, e, tt.problem)
			}
		})
	}
}

// buildCases are part lists idem key accepts (no list empty, no part
// empty): those of the Build tests and a few that used to give a key with
// an empty part.
func buildCases() [][]string {
	return [][]string{
		{"evt", "release-42", "notify"},
		{"backup-2026-12-02"},
		{"abc", "defg"},
		{strings.Repeat("a", 128)},
		{"deploy", "my app"},
		{"caf\u00e9", "order"},
		{"evt:release-42"},
		{"ab"},
		{strings.Repeat("a", 129)},
		{"a\xff\xfeb"},
		{strings.Repeat("a", 200)},
		{"a:b"},
		{"a", "b"},
		{"release-42::notify"},
		{"abcdefgh::0123456789abcdef"},
		{strings.Repeat("a", 110), "b"},
		{"say \"hi\"", "it's", "a:b", "caf\u00e9 \u00fcn\u00ef"},
		{"-v", "x"},
		{":"},
		{":", ":"},
		{"deploy", ":prod"},
		{"deploy:", "prod"},
		{strings.Repeat("a", 109) + ":", "b"},
		{"........"},
		{"--------"},
		{"_"},
	}
}

// TestBuildPassesCheckParts feeds idem key's inputs to the --key check:
// every key idem key prints is one idem run takes.
func TestBuildPassesCheckParts(t *testing.T) {
	for _, parts := range buildCases() {
		k := Build(parts...)
		if err := Validate(k); err != nil {
			t.Errorf("Build(%q)=%q: %v", parts, k, err)
		}
		if err := CheckParts(k); err != nil {
			t.Errorf("Build(%q)=%q: %v", parts, k, err)
		}
	}
}

// TestBuildKeepsKeysWithoutEmptyParts pins what the empty-part rule
// changed: keys whose readable part had no empty part are as they were.
func TestBuildKeepsKeysWithoutEmptyParts(t *testing.T) {
	tests := []struct {
		parts []string
		want  string
	}{
		{[]string{"say \"hi\"", "it's", "a:b", "caf\u00e9 \u00fcn\u00ef"}, "say__hi_:it_s:a:b:caf___n_::132161554dbface9"},
		{[]string{"deploy", "my app"}, "deploy:my_app::1343537dba3dd891"},
		{[]string{"evt", "release-42", "notify"}, "evt:release-42:notify"},
	}
	for _, tt := range tests {
		if got := Build(tt.parts...); got != tt.want {
			t.Errorf("Build(%q)=%q, want %q", tt.parts, got, tt.want)
		}
	}
}

func TestBuildEmptyPartPrefix(t *testing.T) {
	tests := []struct {
		parts  []string
		prefix string
	}{
		{[]string{":"}, "_::"},
		{[]string{":", ":"}, "_:_::"},
		{[]string{"deploy", ":prod"}, "deploy:_prod::"},
		{[]string{"deploy:", "prod"}, "deploy:_prod::"},
		{[]string{"........"}, "........::"},
		{[]string{strings.Repeat("a", 109) + ":", "b"}, strings.Repeat("a", 109) + "_::"},
	}
	for _, tt := range tests {
		got := Build(tt.parts...)
		if !strings.HasPrefix(got, tt.prefix) || len(got) != len(tt.prefix)+hashLen {
			t.Errorf("Build(%q)=%q, want %q followed by %d hex digits", tt.parts, got, tt.prefix, hashLen)
		}
	}
}
