package procs

import "testing"

func TestRunString(t *testing.T) {
	r := Run{Ledger: "abc123", Key: "evt:a/b", Token: 42, Attempt: 3}
	got, ok := ParseRun(r.String())
	if !ok || got != r {
		t.Fatalf("ParseRun(%q) = %+v, %v; want %+v", r.String(), got, ok, r)
	}
	for _, bad := range []string{"", "a/b/c", "a/x/1/k", "a/1/x/k", "/1/1/k", "a/1/1/"} {
		if _, ok := ParseRun(bad); ok {
			t.Errorf("ParseRun(%q) accepted", bad)
		}
	}
	if got, want := EnvValue(" x/1/1/k ", r), "x/1/1/k "+r.String(); got != want {
		t.Errorf("EnvValue = %q, want %q", got, want)
	}
}

func TestRunBefore(t *testing.T) {
	me := Run{Ledger: "L", Key: "k", Token: 5, Attempt: 2}
	for _, tc := range []struct {
		name string
		r    Run
		want bool
	}{
		{"older token", Run{Ledger: "L", Key: "k", Token: 4, Attempt: 9}, true},
		{"earlier attempt", Run{Ledger: "L", Key: "k", Token: 5, Attempt: 1}, true},
		{"itself", me, false},
		{"newer token", Run{Ledger: "L", Key: "k", Token: 6, Attempt: 1}, false},
		{"other key", Run{Ledger: "L", Key: "j", Token: 1, Attempt: 1}, false},
		{"other ledger", Run{Ledger: "M", Key: "k", Token: 1, Attempt: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.Before(me); got != tc.want {
				t.Errorf("%+v.Before(%+v) = %v, want %v", tc.r, me, got, tc.want)
			}
		})
	}
}
