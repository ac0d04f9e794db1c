package cmdline

import "testing"

func TestLeadingWord(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"run", "--key", "k"}, "run"},
		{[]string{"--ledger", "x.db", "--color", "never", "inspect"}, "inspect"},
		{[]string{"--ledger=x.db", "--color=never", "purge"}, "purge"},
		{[]string{"--ledger"}, ""},
		{[]string{"--version"}, ""},
		{[]string{"-h", "run"}, ""},
		{[]string{"rn"}, "rn"},
	} {
		if got := LeadingWord(tc.args); got != tc.want {
			t.Errorf("LeadingWord(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestForCompanion(t *testing.T) {
	const dsn = "postgres://u@db/idem"
	env := func(kv ...string) func(string) string {
		return func(name string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == name {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		env  func(string) string
		want bool
	}{
		{"IDEM_LEDGER", []string{"run", "--key", "k", "--", "true"}, env("IDEM_LEDGER", dsn), true},
		{"keyword DSN", []string{"inspect"}, env("IDEM_LEDGER", "host=db dbname=idem"), true},
		{"--ledger before the subcommand", []string{"--ledger", dsn, "purge", "--all"}, env(), true},
		{"--ledger= after it", []string{"check", "--ledger=" + dsn}, env(), true},
		{"--ledger over IDEM_LEDGER", []string{"run", "--ledger", "l.db", "--key", "k", "--", "true"}, env("IDEM_LEDGER", dsn), false},
		{"the last --ledger", []string{"--ledger", "l.db", "metrics", "--ledger", dsn}, env(), true},
		{"the command's --ledger", []string{"run", "--key", "k", "--", "tool", "--ledger", dsn}, env(), false},
		{"a ledger file", []string{"run", "--key", "k", "--", "true"}, env("IDEM_LEDGER", "/var/lib/idem/ledger.db"), false},
		{"no ledger named", []string{"run", "--key", "k", "--", "true"}, env(), false},
		{"--ledger without its value", []string{"backup", "--ledger"}, env("IDEM_LEDGER", dsn), true},
		{"schema", []string{"schema", "--apply"}, env("IDEM_LEDGER", dsn), true},
		{"key opens no ledger", []string{"key", "a", "b"}, env("IDEM_LEDGER", dsn), false},
		{"version", []string{"--version"}, env("IDEM_LEDGER", dsn), false},
		{"help", []string{"help", "run"}, env("IDEM_LEDGER", dsn), false},
		{"a typo", []string{"rn", "--key", "k"}, env("IDEM_LEDGER", dsn), false},
		{"IDEM_PING_URL", []string{"run", "--key", "k", "--", "true"}, env("IDEM_PING_URL", "https://hc.example/x"), true},
		{"--ping", []string{"run", "--ping", "https://hc.example/x", "--key", "k", "--", "true"}, env(), true},
		{"--ping=", []string{"run", "--ping=https://hc.example/x", "--key", "k", "--", "true"}, env(), true},
		{"IDEM_PING_URL empty", []string{"run", "--key", "k", "--", "true"}, env("IDEM_PING_URL", ""), false},
		{"pings are run's", []string{"inspect"}, env("IDEM_PING_URL", "https://hc.example/x"), false},
		{"the command's --ping", []string{"run", "--key", "k", "--", "tool", "--ping", "x"}, env(), false},
	} {
		if got := ForCompanion(tc.args, tc.env); got != tc.want {
			t.Errorf("%s: ForCompanion(%q) = %v, want %v", tc.name, tc.args, got, tc.want)
		}
	}
}
