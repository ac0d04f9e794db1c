package cmd

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestInvoked(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--key", "k", "--", "true"}, "run"},
		{[]string{"--ledger", "/tmp/l.db", "run"}, "run"},
		{[]string{"--ledger=/tmp/l.db", "--color", "never", "inspect", "k"}, "inspect"},
		{[]string{"--color=always", "purge", "--expired"}, "purge"},
		{[]string{"key", "a", "b"}, "key"},
		{[]string{"--ledger", "run"}, ""}, // "run" is --ledger's value
		{[]string{"--help", "run"}, ""},
		{[]string{"--version"}, ""},
		{[]string{"help", "run"}, ""},
		{[]string{"completion", "bash"}, ""},
		{[]string{"__complete", "run", ""}, ""},
		{[]string{"man"}, ""},
		{[]string{"runn"}, ""},
		{nil, ""},
	} {
		if got := invoked(c.args); got != c.want {
			t.Errorf("invoked(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}

// TestOnlyInvokedCommandIsBuilt: a run builds the root and run alone, and
// what it prints does not depend on it (help, errors).
func TestOnlyInvokedCommandIsBuilt(t *testing.T) {
	a := &app{colorFlag: "auto", getenv: func(string) string { return "" }}
	root := newRootCmd(a, []string{"--ledger", "x.db", "run", "--key", "k"})
	if cs := root.Commands(); len(cs) != 1 || cs[0].Name() != "run" {
		t.Fatalf("commands built for a run: %v", cs)
	}
	for _, args := range [][]string{{"--version"}, {"-v"}, {"--color", "never", "--version"}} {
		if cs := newRootCmd(a, args).Commands(); len(cs) != 0 {
			t.Fatalf("%q built commands %v: --version needs none", args, cs)
		}
	}
	if n := len(newRootCmd(a, []string{"--help"}).Commands()); n < 6 {
		t.Fatalf("--help built %d commands, want all", n)
	}
	for _, args := range [][]string{{"run", "--help"}, {"--ledger", "x.db", "purge", "--help"}, {"key", "--help"}} {
		var lazy, full bytes.Buffer
		if code := Main(context.Background(), args, &lazy, &lazy, linkedAll()); code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, lazy.String())
		}
		root := newRootCmd(&app{stdout: &full, stderr: &full, getenv: func(string) string { return "" }, colorFlag: "auto"}, nil)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		if lazy.String() != full.String() || !strings.Contains(full.String(), "EXIT STATUS") {
			t.Errorf("%q: help differs from the whole tree's:\n%s\n---\n%s", args, lazy.String(), full.String())
		}
	}
}
