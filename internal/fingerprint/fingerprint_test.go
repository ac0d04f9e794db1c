package fingerprint

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestSumDistinct(t *testing.T) {
	stdinA := sha256.Sum256([]byte("a"))
	stdinB := sha256.Sum256([]byte("b"))
	inputs := []struct {
		name string
		in   Input
	}{
		{"nothing", Input{}},
		{"empty arg", Input{Argv: []string{""}}},
		{"a b joined", Input{Argv: []string{"a b"}}},
		{"a b split", Input{Argv: []string{"a", "b"}}},
		{"ab empty", Input{Argv: []string{"ab", ""}}},
		{"empty ab", Input{Argv: []string{"", "ab"}}},
		{"ab", Input{Argv: []string{"ab"}}},
		{"nul inside", Input{Argv: []string{"a\x00b"}}},
		{"payload empty", Input{Argv: []string{"a"}, HasPayload: true}},
		{"payload raw", Input{Argv: []string{"a"}, Payload: []byte("x"), HasPayload: true}},
		{"payload json", Input{Argv: []string{"a"}, Payload: []byte(`"x"`), HasPayload: true}},
		{"payload 1.0", Input{Argv: []string{"a"}, Payload: []byte(`1.0`), HasPayload: true}},
		{"payload 1", Input{Argv: []string{"a"}, Payload: []byte(`1`), HasPayload: true}},
		{"payload raw looks like argv", Input{Argv: []string{"a"}, Payload: []byte("\x00\x00\x00\x00\x00\x00\x00\x01b"), HasPayload: true}},
		{"env unset", Input{Argv: []string{"a"}, Env: []EnvVar{{Name: "X"}}}},
		{"env empty", Input{Argv: []string{"a"}, Env: []EnvVar{{Name: "X", Set: true}}}},
		{"env value", Input{Argv: []string{"a"}, Env: []EnvVar{{Name: "X", Value: "1", Set: true}}}},
		{"env other name", Input{Argv: []string{"a"}, Env: []EnvVar{{Name: "Y", Value: "1", Set: true}}}},
		{"env two", Input{Argv: []string{"a"}, Env: []EnvVar{{Name: "X", Value: "1", Set: true}, {Name: "Y", Set: true}}}},
		{"env name holds value", Input{Argv: []string{"a"}, Env: []EnvVar{{Name: "X=1", Set: true}}}},
		{"stdin empty", Input{Argv: []string{"a"}, Stdin: []byte{}}},
		{"stdin a", Input{Argv: []string{"a"}, Stdin: stdinA[:]}},
		{"stdin b", Input{Argv: []string{"a"}, Stdin: stdinB[:]}},
		{"everything", Input{Argv: []string{"a"}, Payload: []byte(`{}`), HasPayload: true, Env: []EnvVar{{Name: "X", Set: true}}, Stdin: stdinA[:]}},
	}
	seen := map[string]string{}
	for _, tt := range inputs {
		enc, err := encode(tt.in)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if prev, ok := seen[string(enc)]; ok {
			t.Errorf("%s and %s have the same encoding", tt.name, prev)
		}
		seen[string(enc)] = tt.name
		sum, err := Sum(tt.in)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got, want := sum, hex.EncodeToString(sha256.New().Sum(nil)); len(got) != len(want) {
			t.Fatalf("%s: Sum=%q, want %d hex digits", tt.name, got, len(want))
		}
		if prev, ok := seen[sum]; ok {
			t.Errorf("%s and %s have the same sum", tt.name, prev)
		}
		seen[sum] = tt.name
	}
}

func TestSumEqual(t *testing.T) {
	tests := []struct {
		name string
		a, b Input
	}{
		{
			"json key order and whitespace",
			Input{Argv: []string{"curl"}, Payload: []byte(`{"b":1,"a":[1,2]}`), HasPayload: true},
			Input{Argv: []string{"curl"}, Payload: []byte("{\n  \"a\": [1, 2],\n  \"b\": 1\n}\n"), HasPayload: true},
		},
		{
			"env order",
			Input{Argv: []string{"x"}, Env: []EnvVar{{Name: "B", Value: "2", Set: true}, {Name: "A", Set: false}}},
			Input{Argv: []string{"x"}, Env: []EnvVar{{Name: "A", Set: false}, {Name: "B", Value: "2", Set: true}}},
		},
		{
			"env repeated",
			Input{Argv: []string{"x"}, Env: []EnvVar{{Name: "A", Value: "1", Set: true}, {Name: "A", Value: "1", Set: true}}},
			Input{Argv: []string{"x"}, Env: []EnvVar{{Name: "A", Value: "1", Set: true}}},
		},
		{
			"unset value ignored",
			Input{Argv: []string{"x"}, Env: []EnvVar{{Name: "A", Value: "junk"}}},
			Input{Argv: []string{"x"}, Env: []EnvVar{{Name: "A"}}},
		},
		{
			"payload ignored without HasPayload",
			Input{Argv: []string{"x"}, Payload: []byte("junk")},
			Input{Argv: []string{"x"}},
		},
		{
			"nil and empty argv",
			Input{Argv: nil},
			Input{Argv: []string{}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := Sum(tt.a)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Sum(tt.b)
			if err != nil {
				t.Fatal(err)
			}
			if a != b {
				t.Fatalf("sums differ: %s vs %s", a, b)
			}
		})
	}
}

// TestSumGolden pins the encoding: changing it would make every recorded
// key refuse its own command.
func TestSumGolden(t *testing.T) {
	in := Input{
		Argv:       []string{"curl", "-d", "@-"},
		Payload:    []byte(`{"b":1,"a":"x"}`),
		HasPayload: true,
		Env:        []EnvVar{{Name: "TOKEN", Value: "s3cret", Set: true}, {Name: "DEBUG"}},
	}
	got, err := Sum(in)
	if err != nil {
		t.Fatal(err)
	}
	// Computed independently, from the encoding in Sum's doc comment.
	if want := "ca5a52f2ba31621c0cd6d281b76f69a52c22ed8ffca19f68d93cb85ecbeea7b9"; got != want {
		t.Fatalf("Sum=%s, want %s", got, want)
	}
}

func TestSumErrors(t *testing.T) {
	_, err := Sum(Input{Argv: []string{"x"}, Payload: []byte(`{"a":{"b":1,"b":2}}`), HasPayload: true})
	var de *DuplicateKeyError
	if !errors.As(err, &de) || de.Path != "/a/b" {
		t.Fatalf("duplicate key payload: %v, want *DuplicateKeyError at /a/b", err)
	}

	_, err = Sum(Input{Argv: []string{"x"}, Env: []EnvVar{{Name: "A", Value: "secret-1", Set: true}, {Name: "A", Value: "secret-2", Set: true}}})
	if err == nil {
		t.Fatal("conflicting env repeats: no error")
	}
	if msg := err.Error(); strings.Contains(msg, "secret-1") || strings.Contains(msg, "secret-2") {
		t.Fatalf("error %q shows an env value", msg)
	}
}

func TestSumDoesNotModifyInput(t *testing.T) {
	env := []EnvVar{{Name: "B", Set: true}, {Name: "A", Value: "junk"}}
	if _, err := Sum(Input{Env: env}); err != nil {
		t.Fatal(err)
	}
	if env[0].Name != "B" || env[1].Value != "junk" {
		t.Fatalf("Sum modified Env: %+v", env)
	}
}

func BenchmarkSum(b *testing.B) {
	in := Input{
		Argv:       []string{"curl", "-sS", "-X", "POST", "-d", "@-", "https://api.example.com/v1/orders"},
		Payload:    testPayload(10 << 10),
		HasPayload: true,
		Env:        []EnvVar{{Name: "API_TOKEN", Value: "s3cret", Set: true}, {Name: "REGION", Value: "eu-west-1", Set: true}},
	}
	b.SetBytes(int64(len(in.Payload)))
	for b.Loop() {
		if _, err := Sum(in); err != nil {
			b.Fatal(err)
		}
	}
}
