package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/idemhq/idem/cmd"
)

// TestMain registers idem and the helper programs the scripts run as
// separate processes (testscript re-executes this test binary).
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"idem":     func() { os.Exit(cmd.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) },
		"echoargs": echoargs,
		"exitwith": exitwith,
		"flaky":    flaky,
		"sleeper":  sleeper,
		"printenv": printenv,
		"catstdin": catstdin,
		"writebin": writebin,
		"appendto": appendto,
		"listfds":  listfds, // reliability_test.go
		// crash-safety helpers (leases_test.go)
		"crashjob":   crashjob,
		"bgholder":   bgholder,
		"retryafter": retryafter,
		"slowflaky":  slowflaky,
		"trapexit":   trapexit,
		"slowappend": slowappend,
		"gate":       gate,
		"fgcheck":    fgcheck,
		// operators' helpers (operators_test.go)
		"seedrecord": seedrecord,
		// an HTTP API stand-in for the README's webhook example (readme_test.go)
		"httpsink": httpsink,
	})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testscripts",
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Condition:           pgScriptCondition, // [postgres]: IDEM_TEST_POSTGRES is set (postgres_fleet_test.go)
		Setup: func(env *testscript.Env) error {
			env.Setenv("IDEM_LEDGER", filepath.Join(env.WorkDir, "state", "ledger.db"))
			env.Setenv("HOME", filepath.Join(env.WorkDir, "home"))
			env.Setenv("XDG_STATE_HOME", "")
			env.Setenv("NO_COLOR", "")
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exitcode": cmdExitcode,
			"filemode": cmdFilemode,
			"waitfile": cmdWaitfile,
			// operators' checks (operators_test.go)
			"jsonfield": cmdJSONField,
			"jsonkeys":  cmdJSONKeys,
			// a fresh PostgreSQL ledger (postgres_fleet_test.go)
			"pgledger": cmdPGLedger,
		},
	})
}

// exitcode N prog args... runs prog and asserts its exit code is exactly N
// (testscript's ! only asserts non-zero). stdout and stderr are kept for
// the usual stdout/stderr assertions.
func cmdExitcode(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exitcode N prog [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exitcode: bad code %q", args[0])
	}
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	if err != nil {
		var ok bool
		got, ok = exitStatus(err)
		if !ok {
			ts.Fatalf("exitcode: %v", err)
		}
	}
	if got != want {
		ts.Fatalf("exit code %d, want %d", got, want)
	}
}

func exitStatus(err error) (int, bool) {
	type exitCoder interface{ ExitCode() int }
	if e, ok := err.(exitCoder); ok {
		return e.ExitCode(), true
	}
	return 0, false
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

// echoargs prints its arguments, one line, space separated.
func echoargs() {
	fmt.Println(strings.Join(os.Args[1:], " "))
}

// exitwith N [STDOUT [STDERR]] prints the texts and exits N.
func exitwith() {
	if len(os.Args) > 2 {
		fmt.Println(os.Args[2])
	}
	if len(os.Args) > 3 {
		fmt.Fprintln(os.Stderr, os.Args[3])
	}
	code, _ := strconv.Atoi(os.Args[1])
	os.Exit(code)
}

// flaky COUNTER FAILS CODE: exits CODE for the first FAILS calls that share
// COUNTER (a file), then 0. It prints the call number on stdout.
func flaky() {
	path, fails, code := os.Args[1], atoi(os.Args[2]), atoi(os.Args[3])
	b, _ := os.ReadFile(path)
	n := atoi(strings.TrimSpace(string(b))) + 1
	if err := os.WriteFile(path, []byte(strconv.Itoa(n)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Printf("call %d\n", n)
	if n <= fails {
		fmt.Fprintf(os.Stderr, "call %d failing with %d\n", n, code)
		os.Exit(code)
	}
}

// sleeper DURATION [READYFILE]: writes READYFILE (with its pid), then sleeps.
func sleeper() {
	d, err := time.ParseDuration(os.Args[1])
	if err != nil {
		os.Exit(2)
	}
	if len(os.Args) > 2 {
		os.WriteFile(os.Args[2], []byte(strconv.Itoa(os.Getpid())), 0o644)
	}
	time.Sleep(d)
	fmt.Println("slept", d)
}

// printenv NAME... prints NAME=value for each (or NAME unset).
func printenv() {
	for _, name := range os.Args[1:] {
		if v, ok := os.LookupEnv(name); ok {
			fmt.Printf("%s=%s\n", name, v)
		} else {
			fmt.Printf("%s unset\n", name)
		}
	}
}

// catstdin copies stdin to stdout, prefixed with the attempt number.
func catstdin() {
	fmt.Printf("attempt %s: ", os.Getenv("IDEM_ATTEMPT"))
	io.Copy(os.Stdout, bufio.NewReader(os.Stdin))
}

// writebin N: writes N bytes 0..255 repeating to stdout and, reversed, to stderr.
func writebin() {
	n := atoi(os.Args[1])
	out, errb := make([]byte, n), make([]byte, n)
	for i := range n {
		out[i] = byte(i)
		errb[i] = byte(255 - i%256)
	}
	os.Stdout.Write(out)
	os.Stderr.Write(errb)
}

// appendto FILE LINE: appends LINE to FILE (one execution, one line).
func appendto() {
	f, err := os.OpenFile(os.Args[1], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		os.Exit(2)
	}
	fmt.Fprintln(f, os.Args[2])
	f.Close()
	fmt.Println(os.Args[2])
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
