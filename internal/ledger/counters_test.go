package ledger

import (
	"testing"
)

func TestCountersAdd(t *testing.T) {
	a := Counters{Replays: 1, RunsFailed: 2, AttemptsTimeout: 3}
	a.Add(Counters{Replays: 10, RunsFailed: 20, AttemptsTimeout: 30, AttemptsSuccess: 5})
	if want := (Counters{Replays: 11, RunsFailed: 22, AttemptsTimeout: 33, AttemptsSuccess: 5}); a != want {
		t.Errorf("Add: %+v, want %+v", a, want)
	}
	if n := len(a.Fields()); n != 10 {
		t.Errorf("%d fields, want one per column of CounterColumns (10)", n)
	}
}
