package fingerprint

import "testing"

// What every run pays: a fingerprint of the argv alone.
func BenchmarkSumArgv(b *testing.B) {
	in := Input{Argv: []string{"/usr/local/bin/backup", "--target", "s3://bucket/nightly", "--verbose"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Sum(in); err != nil {
			b.Fatal(err)
		}
	}
}

// A webhook's small JSON payload, canonicalised.
func BenchmarkCanonicalJSONSmall(b *testing.B) {
	in := []byte(`{"id": "evt_1Nq", "type": "invoice.paid", "data": {"amount": 4200, "currency": "eur", "lines": [1, 2, 3]}}`)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CanonicalJSON(in); err != nil {
			b.Fatal(err)
		}
	}
}
