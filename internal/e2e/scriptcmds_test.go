package e2e

// The scripts' own commands, beside testscript's built-in ones.

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/idemhq/idem/internal/ledger/ledgertest"
	"github.com/idemhq/idem/internal/testenv"
)

// scriptCmds is every custom script command, by name.
func scriptCmds() map[string]func(ts *testscript.TestScript, neg bool, args []string) {
	return map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"exitcode":  cmdExitcode,  // an exact exit code
		"filemode":  cmdFilemode,  // a file's permission bits
		"waitfile":  cmdWaitfile,  // wait for a background command's ready file
		"waitmatch": cmdWaitmatch, // wait for lines in a background command's log
		"need":      cmdNeed,      // a program or server the script needs

		// JSON checks for the operators' scripts
		"jsonfield": cmdJSONField,
		"jsonkeys":  cmdJSONKeys,

		// a fresh PostgreSQL ledger
		"pgledger": cmdPGLedger,
	}
}

// scriptT is the key under which Setup keeps the script's testscript.T,
// for need to skip the script.
type scriptT struct{}

// need NAME... skips the script unless every NAME is there, or fails it
// when IDEM_TEST_STRICT=1 (as in CI): NAME is a program on PATH, or
// "postgres" for a server named by IDEM_TEST_POSTGRES. It comes first in
// a script, before any background command.
func cmdNeed(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: need NAME...")
	}
	t, ok := ts.Value(scriptT{}).(testscript.T)
	if !ok {
		ts.Fatalf("need: Setup did not keep the script's T")
	}
	for _, name := range args {
		ok, why := available(name)
		testenv.Need(scriptNeed{ts, t}, name, ok, why)
	}
}

// scriptNeed lets testenv.Need skip or fail a script.
type scriptNeed struct {
	ts *testscript.TestScript
	t  testscript.T
}

func (s scriptNeed) Skip(args ...any)  { s.t.Skip(args...) }
func (s scriptNeed) Fatal(args ...any) { s.ts.Fatalf("%s", fmt.Sprint(args...)) }

// exitcode N prog args... runs prog and asserts its exit code is exactly N
// (testscript's ! only asserts non-zero); a signal death counts as 128+N,
// as in a shell. stdout and stderr are kept for the usual stdout/stderr
// assertions.
func cmdExitcode(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exitcode N prog [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exitcode: bad code %q", args[0])
	}
	err = ts.Exec(args[1], args[2:]...)
	got, ok := exitStatusOf(err)
	if !ok {
		ts.Fatalf("exitcode: %v", err)
	}
	if got.code != want {
		ts.Fatalf("%v, want exit %d", got, want)
	}
}

// filemode MODE path asserts a file's permission bits (octal).
func cmdFilemode(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: filemode MODE path")
	}
	want, err := strconv.ParseUint(args[0], 8, 32)
	if err != nil {
		ts.Fatalf("filemode: bad mode %q", args[0])
	}
	fi, err := os.Stat(ts.MkAbs(args[1]))
	ts.Check(err)
	got := uint64(fi.Mode().Perm())
	if (got == want) == neg {
		ts.Fatalf("%s has mode %#o, want %s%#o", args[1], got, map[bool]string{true: "not ", false: ""}[neg], want)
	}
}

// waitfile PATH waits (at most 10s) until PATH exists.
func cmdWaitfile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitfile PATH")
	}
	path := ts.MkAbs(args[0])
	for range 2000 {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	ts.Fatalf("%s did not appear within 10s", args[0])
}

// waitmatch FILE REGEXP N waits (at most 10s) until N lines of FILE
// match REGEXP.
func cmdWaitmatch(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: waitmatch FILE REGEXP N")
	}
	re, err := regexp.Compile(args[1])
	ts.Check(err)
	n, err := strconv.Atoi(args[2])
	ts.Check(err)
	for range 2000 {
		b, _ := os.ReadFile(ts.MkAbs(args[0]))
		got := 0
		for _, l := range strings.Split(string(b), "\n") {
			if re.MatchString(l) {
				got++
			}
		}
		if got >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	ts.Fatalf("%s did not have %d lines matching %q within 10s", args[0], n, args[1])
}

// cmdPGLedger (pgledger) points the script's IDEM_LEDGER at a new, empty
// PostgreSQL database, dropped when the script ends, and sets PGSECRET to
// the password it connects with (for "! stderr $PGSECRET"), PGKV and
// PGKV_PASSWORD to the database as a keyword/value DSN without and with
// the password, PGURL_NOPASSWORD to the URL without it and
// PGURL_PASSWORD_PARAM to the URL with it as a parameter.
func cmdPGLedger(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: pgledger")
	}
	base := os.Getenv("IDEM_TEST_POSTGRES")
	if base == "" {
		ts.Fatalf("pgledger: IDEM_TEST_POSTGRES is not set (start the script with need postgres)")
	}
	dsn, _, err := ledgertest.NewPostgresDatabase(base, ts.Defer)
	ts.Check(err)
	ts.Setenv("IDEM_LEDGER", dsn)
	u, _ := url.Parse(dsn)
	secret, ok := u.User.Password()
	if !ok || secret == "" {
		secret = "no-password-in-IDEM_TEST_POSTGRES"
	}
	ts.Setenv("PGSECRET", secret)
	// The same database in libpq's keyword/value form, with the password
	// and without it, and the URL without it.
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	kv := fmt.Sprintf("host=%s port=%s dbname=%s user=%s", u.Hostname(), port, strings.TrimPrefix(u.Path, "/"), u.User.Username())
	if m := u.Query().Get("sslmode"); m != "" {
		kv += " sslmode=" + m
	}
	ts.Setenv("PGKV", kv)
	ts.Setenv("PGKV_PASSWORD", kv+" password='"+strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(secret)+"'")
	nopw := *u
	nopw.User = url.User(u.User.Username())
	ts.Setenv("PGURL_NOPASSWORD", nopw.String())
	q := nopw.Query()
	q.Set("password", secret)
	nopw.RawQuery = q.Encode()
	ts.Setenv("PGURL_PASSWORD_PARAM", nopw.String())
}

// jsonAt reads FILE (or the last stdout, for "stdout") as JSON and returns
// the value at PATH: dot-separated object fields and array indexes; "."
// is the whole document.
func jsonAt(ts *testscript.TestScript, file, path string) (any, bool) {
	data := ts.ReadFile(file) // "stdout" and "stderr" are the last command's
	var v any
	dec := json.NewDecoder(strings.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		ts.Fatalf("%s: not JSON: %v", file, err)
	}
	if dec.More() {
		ts.Fatalf("%s: more than one JSON value", file)
	}
	if path == "." {
		return v, true
	}
	for _, seg := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[seg]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// jsonfield FILE PATH WANT checks one JSON value: a string equals WANT; any
// other value's JSON text (0, true, null, [...]) equals WANT. WANT
// "~REGEXP" matches a string or JSON text instead; WANT "#N" checks that an
// array or object has N elements. FILE "stdout" is the last command's
// stdout. With !, the value must exist and differ.
func cmdJSONField(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: jsonfield FILE PATH WANT")
	}
	v, ok := jsonAt(ts, args[0], args[1])
	if !ok {
		ts.Fatalf("%s: no value at %s", args[0], args[1])
	}
	got, isString := v.(string)
	if !isString {
		b, err := json.Marshal(v)
		ts.Check(err)
		got = string(b)
	}
	want := args[2]
	var match bool
	switch {
	case strings.HasPrefix(want, "~"):
		re, err := regexp.Compile(want[1:])
		ts.Check(err)
		match = re.MatchString(got)
	case strings.HasPrefix(want, "#"):
		n := -1
		switch x := v.(type) {
		case []any:
			n = len(x)
		case map[string]any:
			n = len(x)
		}
		match = strconv.Itoa(n) == want[1:]
		got = fmt.Sprintf("%d elements", n)
	default:
		match = got == want
	}
	if match == neg {
		ts.Fatalf("%s %s = %s, want %s%s", args[0], args[1], got, map[bool]string{true: "not ", false: ""}[neg], want)
	}
}

// jsonkeys FILE PATH NAME... checks that the object at PATH has exactly
// these fields, so that a schema cannot grow or lose one unnoticed.
func cmdJSONKeys(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: jsonkeys FILE PATH NAME...")
	}
	v, ok := jsonAt(ts, args[0], args[1])
	obj, isObj := v.(map[string]any)
	if !ok || !isObj {
		ts.Fatalf("%s: no object at %s", args[0], args[1])
	}
	var got []string
	for k := range obj {
		got = append(got, k)
	}
	want := slices.Clone(args[2:])
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		ts.Fatalf("%s %s has fields %q, want %q", args[0], args[1], got, want)
	}
}
