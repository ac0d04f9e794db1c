package fingerprint

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"
)

// decodeNumbers decodes b with encoding/json, keeping numbers as written.
func decodeNumbers(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[1,2,{"d":null,"c":true}]}`,
		`12345678901234567890123`,
		`[1.0,1,1e2,-0,0.5E-3]`,
		`"\u00e9\ud83d\ude00\n\u0000"`,
		`{"a":1,"\u0061":2}`,
		`{"a":1} x`,
		`"\ud800"`,
		"\"caf\xe9\"",
		` [ ] `,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := CanonicalJSON(in)
		var de *DuplicateKeyError
		switch {
		case errors.Is(err, ErrNotJSON):
			// Only what encoding/json rejects, or what it would silently
			// alter (invalid UTF-8, escaped surrogates), may be refused.
			if json.Valid(in) && utf8.Valid(in) && !bytes.Contains(in, []byte(`\u`)) {
				t.Fatalf("CanonicalJSON(%q): %v, but encoding/json accepts it", in, err)
			}
			return
		case errors.As(err, &de):
			if !json.Valid(in) {
				t.Fatalf("CanonicalJSON(%q): %v, want ErrNotJSON", in, err)
			}
			return
		case err != nil:
			t.Fatalf("CanonicalJSON(%q): unexpected error %v", in, err)
		}
		if !json.Valid(in) {
			t.Fatalf("CanonicalJSON(%q)=%q, but encoding/json rejects the input", in, out)
		}
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("CanonicalJSON(%q)=%q, not valid JSON", in, out)
		}
		again, err := CanonicalJSON(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: CanonicalJSON(%q)=%q, then %q, %v", in, out, again, err)
		}
		want, err := decodeNumbers(in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeNumbers(out)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("CanonicalJSON(%q)=%q decodes to %#v, want %#v", in, out, got, want)
		}
	})
}
