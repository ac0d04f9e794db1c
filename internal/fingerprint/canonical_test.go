package fingerprint

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestCanonicalJSON(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"scalar number", "1", "1"},
		{"surrounding whitespace", " \t\r\n{ \"a\" : 1 }\n", `{"a":1}`},
		{"key order", `{"b":1,"a":2,"c":3}`, `{"a":2,"b":1,"c":3}`},
		{"nested", `{"z":{"y":[1,{"b":2,"a":1}],"x":null},"a":true}`, `{"a":true,"z":{"x":null,"y":[1,{"a":1,"b":2}]}}`},
		{"array order kept", `[3, 1, 2]`, `[3,1,2]`},
		{"1.0 verbatim", `1.0`, `1.0`},
		{"exponent verbatim", `1e2`, `1e2`},
		{"exponent sign verbatim", `[1E+2,-0,0.5e-3]`, `[1E+2,-0,0.5e-3]`},
		{"big int verbatim", `12345678901234567890123`, `12345678901234567890123`},
		{"big float verbatim", `{"n":3.14159265358979323846264338327950288}`, `{"n":3.14159265358979323846264338327950288}`},
		{"unicode escape decoded", `"\u00e9"`, `"é"`},
		{"surrogate pair decoded", `"\ud83d\ude00"`, "\"\U0001F600\""},
		{"short escapes", `"\"\\\/\b\f\n\r\t"`, `"\"\\/\b\f\n\r\t"`},
		{"control escapes", `"\u0000\u001f\u007f"`, "\"\\u0000\\u001f\x7f\""},
		{"no HTML escaping", `"<a&b>\u2028"`, "\"<a&b>\u2028\""},
		{"keys sorted by decoded bytes", `{"\u00e9":1,"z":2,"\u0041":3}`, `{"A":3,"z":2,"é":1}`},
		{"empty containers", `{"a":[],"b":{}}`, `{"a":[],"b":{}}`},
		{"literals", `[true,false,null]`, `[true,false,null]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalJSON([]byte(tt.in))
			if err != nil {
				t.Fatalf("CanonicalJSON(%q): %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Fatalf("CanonicalJSON(%q)=%s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestCanonicalJSONEquivalence(t *testing.T) {
	tests := []struct {
		name  string
		a, b  string
		equal bool
	}{
		{"key order", `{"a":1,"b":2}`, `{"b":2,"a":1}`, true},
		{"whitespace", `[1, 2]`, "[1,\n2]", true},
		{"escape vs raw", `"\u00e9"`, `"é"`, true},
		{"escaped key vs raw", `{"\u0061":1}`, `{"a":1}`, true},
		{"1.0 vs 1", `1.0`, `1`, false},
		{"1e2 vs 100", `1e2`, `100`, false},
		{"array order", `[1,2]`, `[2,1]`, false},
		{"string vs number", `"1"`, `1`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := CanonicalJSON([]byte(tt.a))
			if err != nil {
				t.Fatal(err)
			}
			b, err := CanonicalJSON([]byte(tt.b))
			if err != nil {
				t.Fatal(err)
			}
			if got := string(a) == string(b); got != tt.equal {
				t.Fatalf("canonical %s vs %s: equal=%v, want %v", a, b, got, tt.equal)
			}
		})
	}
}

func TestCanonicalJSONNotJSON(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{"empty", ""},
		{"whitespace only", " \n"},
		{"trailing garbage", `{"a":1} x`},
		{"two values", `1 2`},
		{"trailing comma", `[1,]`},
		{"single quotes", `{'a':1}`},
		{"unquoted key", `{a:1}`},
		{"leading zero", `01`},
		{"plus sign", `+1`},
		{"bare dot", `1.`},
		{"bare exponent", `1e`},
		{"NaN", `NaN`},
		{"truncated literal", `tru`},
		{"raw newline in string", "\"a\nb\""},
		{"invalid escape", `"\x41"`},
		{"short unicode escape", `"\u00e"`},
		{"lone high surrogate", `"\ud800"`},
		{"lone low surrogate", `"\udc00"`},
		{"high surrogate then non-low", `"\ud800\u0041"`},
		{"invalid UTF-8", "\"caf\xe9\""},
		{"UTF-8 encoded surrogate", "\"\xed\xa0\x80\""},
		{"BOM", "\ufeff{}"},
		{"unterminated", `{"a":[1,2`},
		{"non-JSON whitespace", "\v1"},
		{"plain text", "hello world"},
		{"too deep", strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)},
		{"duplicate then garbage", `{"a":1,"a":2} x`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalJSON([]byte(tt.in))
			if !errors.Is(err, ErrNotJSON) {
				t.Fatalf("CanonicalJSON(%.40q)=%.40q, %v; want ErrNotJSON", tt.in, got, err)
			}
		})
	}
}

func TestCanonicalJSONDepth(t *testing.T) {
	for _, open := range []string{"[", `{"a":`} {
		close := map[string]string{"[": "]", `{"a":`: "}"}[open]
		in := strings.Repeat(open, MaxDepth) + "0" + strings.Repeat(close, MaxDepth)
		if _, err := CanonicalJSON([]byte(in)); err != nil {
			t.Fatalf("%d levels of %s: %v", MaxDepth, open, err)
		}
	}
	// Far too deep must fail fast, not exhaust the stack.
	in := strings.Repeat("[", 10_000_000)
	if _, err := CanonicalJSON([]byte(in)); !errors.Is(err, ErrNotJSON) {
		t.Fatalf("10M open brackets: %v, want ErrNotJSON", err)
	}
}

func TestCanonicalJSONDuplicateKey(t *testing.T) {
	tests := []struct {
		name string
		in   string
		key  string
		path string
	}{
		{"top level", `{"a":1,"a":2}`, "a", "/a"},
		{"same value", `{"a":1,"a":1}`, "a", "/a"},
		{"escaped repeat", `{"a":1,"\u0061":2}`, "a", "/a"},
		{"nested in array", `{"items":[{"id":1},{"id":2,"x":0,"id":3}]}`, "id", "/items/1/id"},
		{"pointer escaping", `{"a/b":{"c~d":1,"c~d":2}}`, "c~d", "/a~1b/c~0d"},
		{"deep", `[[[{"k":{"z":1,"z":2}}]]]`, "z", "/0/0/0/k/z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CanonicalJSON([]byte(tt.in))
			var de *DuplicateKeyError
			if !errors.As(err, &de) {
				t.Fatalf("CanonicalJSON(%s)=%v, want *DuplicateKeyError", tt.in, err)
			}
			if de.Key != tt.key || de.Path != tt.path {
				t.Fatalf("duplicate key %q at %q, want %q at %q", de.Key, de.Path, tt.key, tt.path)
			}
			if errors.Is(err, ErrNotJSON) {
				t.Fatalf("duplicate key error %v also matches ErrNotJSON", err)
			}
		})
	}
}

func TestDuplicateKeyErrorMessage(t *testing.T) {
	err := &DuplicateKeyError{Key: "a\nb", Path: "/x/a\nb"}
	if got, want := err.Error(), `duplicate JSON object key "a\nb" at "/x/a\nb"`; got != want {
		t.Fatalf("Error()=%s, want %s", got, want)
	}
}

// TestCanonicalJSONAgreesWithEncodingJSON checks that the canonical form
// decodes, with encoding/json, to the same value as the input.
func TestCanonicalJSONAgreesWithEncodingJSON(t *testing.T) {
	in := testPayload(10 << 10)
	got, err := CanonicalJSON(in)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal(in, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got, &b); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("canonical form decodes differently:\n%v\n%v", a, b)
	}
}

// testPayload returns an indented JSON document of at least n bytes with
// unsorted keys, escapes and assorted numbers.
func testPayload(n int) []byte {
	var b strings.Builder
	b.WriteString("{\n  \"zeta\": \"last\",\n  \"items\": [\n")
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, `    {"name": "item-%d \u00e9\n", "id": %d, "price": %d.%02d, "tags": ["b", "a"], "meta": {"y": null, "x": true, "big": 12345678901234567890%d}}`, i, i, i, i%100, i)
	}
	b.WriteString("\n  ],\n  \"alpha\": 1e3\n}\n")
	return []byte(b.String())
}

func BenchmarkCanonicalJSON(b *testing.B) {
	in := testPayload(10 << 10)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := CanonicalJSON(in); err != nil {
			b.Fatal(err)
		}
	}
}
