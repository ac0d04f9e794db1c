package fingerprint

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
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

// argvList decodes a fuzz string into an argv: the first byte is the
// separator and the rest is split on it; "" is the empty argv.
func argvList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s[1:], s[:1])
}

func FuzzSum(f *testing.F) {
	f.Add("|a b", []byte(nil), false, "|a|b", []byte(nil), false)
	f.Add("|ab|", []byte(nil), false, "|a|b", []byte(nil), false)
	f.Add("|x", []byte(""), true, "|x", []byte(nil), false)
	f.Add("|x", []byte(`{"a":1,"b":2}`), true, "|x", []byte(`{"b":2,"a":1}`), true)
	f.Add("|x", []byte(`1.0`), true, "|x", []byte(`1`), true)
	f.Fuzz(func(t *testing.T, a string, pa []byte, ha bool, b string, pb []byte, hb bool) {
		ia := Input{Argv: argvList(a), Payload: pa, HasPayload: ha}
		ib := Input{Argv: argvList(b), Payload: pb, HasPayload: hb}
		ea, errA := encode(ia)
		eb, errB := encode(ib)
		if errA != nil || errB != nil {
			return // duplicate JSON keys, covered by FuzzCanonicalJSON
		}
		same := slices.Equal(ia.Argv, ib.Argv) && ha == hb
		if same && ha {
			ca, errA := CanonicalJSON(pa)
			cb, errB := CanonicalJSON(pb)
			same = errA == nil && errB == nil && bytes.Equal(ca, cb) ||
				errA != nil && errB != nil && bytes.Equal(pa, pb)
		}
		if bytes.Equal(ea, eb) != same {
			t.Fatalf("inputs %+v and %+v: equal encodings=%v, want %v", ia, ib, !same, same)
		}
	})
}
