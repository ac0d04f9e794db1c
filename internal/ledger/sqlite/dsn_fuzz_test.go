package sqlite

import (
	"strings"
	"testing"
)

// FuzzDSN: whatever the ledger path (--ledger and IDEM_LEDGER are user
// text), the DSN names exactly that file and carries exactly idem's own
// parameters: no '?' or '#' escapes the path, and percent-decoding the path
// part gives the path back.
func FuzzDSN(f *testing.F) {
	for _, s := range []string{
		"/state/ledger.db", "/x/l.db?_pragma=query_only(1)", "/x/l.db?mode=ro&_txlock=deferred",
		"/x/l.db#frag", "/x/100%25.db", "/x/l.db;ATTACH DATABASE 'x' AS y", "/x/é.db", "/x/a b\tc\n.db",
		"/x/%", "/x/%zz", "/x/&_pragma=journal_mode(delete)", "/x/?", "/file:l.db",
	} {
		f.Add(s)
	}
	// Both modes: the read-only DSN only adds a fixed parameter.
	suffixes := map[bool]string{false: dsn("/x", false, false)[len("file:/x"):], true: dsn("/x", true, false)[len("file:/x"):]}
	f.Fuzz(func(t *testing.T, abs string) {
		for _, readOnly := range []bool{false, true} {
			suffix := suffixes[readOnly]
			d := dsn(abs, readOnly, false)
			path, ok := strings.CutPrefix(d, "file:")
			if !ok {
				t.Fatalf("dsn(%q) = %q: no file: scheme", abs, d)
			}
			path, ok = strings.CutSuffix(path, suffix)
			if !ok {
				t.Fatalf("dsn(%q) = %q: does not end in idem's parameters %q", abs, d, suffix)
			}
			if strings.ContainsAny(path, "?#&=;\x00 ") {
				t.Fatalf("dsn(%q): the path part %q holds a character a URI parser would act on", abs, path)
			}
			if got := percentDecode(t, path); got != abs {
				t.Fatalf("dsn(%q): the path part decodes to %q", abs, got)
			}
		}
	})
}

// percentDecode undoes %HH escapes as SQLite's URI parser does.
func percentDecode(t *testing.T, s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			t.Fatalf("truncated escape in %q", s)
		}
		var v byte
		for _, c := range []byte(s[i+1 : i+3]) {
			v <<= 4
			switch {
			case '0' <= c && c <= '9':
				v |= c - '0'
			case 'A' <= c && c <= 'F':
				v |= c - 'A' + 10
			default:
				t.Fatalf("bad escape %q in %q", s[i:i+3], s)
			}
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String()
}
