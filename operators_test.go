package main

// Helpers of the operators' scripts (inspect, purge, key, --report, --ttl):
// a program that writes records with a past clock through the ledger
// package, and script commands that check JSON field by field.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/idemhq/idem/internal/fingerprint"
	"github.com/idemhq/idem/internal/flagval"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

// seedrecord KEY STATUS AGE [TTL] [-- ARGV...] writes KEY into $IDEM_LEDGER
// as if a run had reached STATUS AGE ago (STATUS in_progress: reserved AGE
// ago with a 1h lease, held by pid 4242 on host seedhost, which no local
// check finds dead). With ARGV the record has the fingerprint `idem run --key
// KEY -- ARGV` computes; without, a fingerprint no run has. The record
// stores "seeded KEY" as stdout. Exit 0, or 2 on error.
func seedrecord() {
	if err := seed(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "seedrecord:", err)
		os.Exit(2)
	}
}

func seed(args []string) error {
	fp, argv := "seeded", []string{"seeded"}
	if i := slices.Index(args, "--"); i >= 0 {
		argv = args[i+1:]
		args = args[:i]
		sum, err := fingerprint.Sum(fingerprint.Input{Argv: argv})
		if err != nil {
			return err
		}
		fp = sum
	}
	if len(args) < 3 || len(args) > 4 {
		return fmt.Errorf("usage: seedrecord KEY STATUS AGE [TTL] [-- ARGV...]")
	}
	k, status := args[0], ledger.Status(args[1])
	ago, err := flagval.ParseDuration(args[2])
	if err != nil {
		return err
	}
	var ttl time.Duration
	if len(args) == 4 {
		if ttl, err = flagval.ParseDuration(args[3]); err != nil {
			return err
		}
	}
	ctx := context.Background()
	l, err := sqlite.Open(ctx, os.Getenv("IDEM_LEDGER"))
	if err != nil {
		return err
	}
	defer l.Close()
	at := time.Now().Add(-ago)
	l.Now = func() time.Time { return at }
	res, err := l.Reserve(ctx, ledger.ReserveRequest{Key: k, Fingerprint: fp, Command: argv,
		MaxAttempts: 3, Lease: time.Hour,
		Owner: ledger.Owner{Host: "seedhost", BootID: "seed-boot", PIDNS: 1, PID: 4242, StartTime: 1}})
	if err != nil {
		return err
	}
	if res.Outcome != ledger.Reserved {
		return fmt.Errorf("%s exists", k)
	}
	if status == ledger.StatusInProgress {
		return nil
	}
	code, class := 0, ledger.ClassSuccess
	switch status {
	case ledger.StatusFailed:
		code, class = 3, ledger.ClassPermanent
	case ledger.StatusRetryable:
		code, class = 75, ledger.ClassInterrupted
	case ledger.StatusSucceeded:
	default:
		return fmt.Errorf("unknown status %q", status)
	}
	return l.Finish(ctx, ledger.FinishRequest{Key: k, Token: res.Token, AttemptID: res.AttemptID, Status: status,
		ExitCode: code, ExitSource: "child", Class: class, Duration: 1500 * time.Millisecond, TTL: ttl,
		OutputStored: true, Stdout: []byte("seeded " + k + "\n"), Stderr: []byte{}})
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
