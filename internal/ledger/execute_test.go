package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/idemhq/idem/internal/ledger"
)

// recSteps records the steps Execute calls, and fails the one named fail.
type recSteps struct {
	calls []string
	fail  string
}

var errStep = errors.New("step failed")

func (r *recSteps) step(name string) error {
	r.calls = append(r.calls, name)
	if name == r.fail {
		return errStep
	}
	return nil
}

func (r *recSteps) res(name string, res *ledger.Reservation) (*ledger.Reservation, error) {
	if err := r.step(name); err != nil {
		return nil, err
	}
	return res, nil
}

func (r *recSteps) DeleteExpired(context.Context) error { return r.step("delete expired") }
func (r *recSteps) EndAbandoned(context.Context) error  { return r.step("end abandoned") }
func (r *recSteps) Close(context.Context) error         { return r.step("close") }
func (r *recSteps) Abandon(context.Context) error       { return r.step("abandon") }

func (r *recSteps) Create(context.Context) (*ledger.Reservation, error) {
	return r.res("create", &ledger.Reservation{Outcome: ledger.Reserved, Attempt: 1})
}

func (r *recSteps) Take(_ context.Context, done int, prev *ledger.Snapshot, abandoned bool) (*ledger.Reservation, error) {
	return r.res(fmt.Sprintf("take done=%d prev=%t abandoned=%t", done, prev != nil, abandoned),
		&ledger.Reservation{Outcome: ledger.Reserved, Attempt: done + 1, Prev: prev})
}

func (r *recSteps) Replay(_ context.Context, changed bool) (*ledger.Reservation, error) {
	return r.res(fmt.Sprintf("replay changed=%t", changed), &ledger.Reservation{Outcome: ledger.Replay})
}

// TestExecuteOrder states the one order of each action's steps: a swap of
// two steps, a missing one or an extra one fails it.
func TestExecuteOrder(t *testing.T) {
	owner := &ledger.Owner{Host: "h", PID: 200}
	prev := &ledger.Snapshot{Status: ledger.StatusRetryable}
	mismatch := &ledger.MismatchError{}
	cases := []struct {
		name  string
		d     ledger.Decision
		steps []string
		// outcome and abandoned are what the Reservation says.
		outcome   ledger.Outcome
		abandoned *ledger.Owner
		err       error
	}{
		{"create", ledger.Decision{Action: ledger.ActCreate},
			[]string{"create"}, ledger.Reserved, nil, nil},
		{"create expired", ledger.Decision{Action: ledger.ActCreate, Expired: true},
			[]string{"delete expired", "create"}, ledger.Reserved, nil, nil},
		{"take", ledger.Decision{Action: ledger.ActTake, Done: 2, Prev: prev},
			[]string{"take done=2 prev=true abandoned=false"}, ledger.Reserved, nil, nil},
		{"take abandoned", ledger.Decision{Action: ledger.ActTake, Done: 1, Prev: prev, Abandoned: owner},
			[]string{"end abandoned", "take done=1 prev=true abandoned=true"}, ledger.Reserved, owner, nil},
		{"replay", ledger.Decision{Action: ledger.ActReplay},
			[]string{"replay changed=false"}, ledger.Replay, nil, nil},
		{"close", ledger.Decision{Action: ledger.ActClose},
			[]string{"close", "replay changed=true"}, ledger.Replay, nil, nil},
		{"abandon", ledger.Decision{Action: ledger.ActAbandon, Abandoned: owner},
			[]string{"end abandoned", "abandon", "replay changed=true"}, ledger.Replay, owner, nil},
		{"busy", ledger.Decision{Action: ledger.ActBusy},
			nil, ledger.Busy, nil, nil},
		{"mismatch", ledger.Decision{Action: ledger.ActMismatch, Err: mismatch},
			nil, 0, nil, mismatch},
	}
	covered := map[ledger.Action]bool{}
	for _, c := range cases {
		covered[c.d.Action] = true
		t.Run(c.name, func(t *testing.T) {
			rec := &ledger.Record{Key: "k"}
			steps := &recSteps{}
			res, err := ledger.Execute(context.Background(), c.d, rec, steps)
			if !reflect.DeepEqual(steps.calls, c.steps) {
				t.Errorf("steps %q, want %q", steps.calls, c.steps)
			}
			if err != c.err {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			if err != nil {
				return
			}
			if res.Outcome != c.outcome || res.Outcome != c.d.Outcome() {
				t.Errorf("outcome %v, want %v (Decision.Outcome %v)", res.Outcome, c.outcome, c.d.Outcome())
			}
			if res.Abandoned != c.abandoned {
				t.Errorf("abandoned %v, want %v", res.Abandoned, c.abandoned)
			}
			if c.d.Action == ledger.ActBusy && res.Record != rec {
				t.Errorf("busy names %v, want the record read", res.Record)
			}

			// A failing step ends the reservation: no later step runs,
			// and its error is Execute's.
			for i, name := range c.steps {
				steps := &recSteps{fail: name}
				res, err := ledger.Execute(context.Background(), c.d, rec, steps)
				if !errors.Is(err, errStep) || res != nil {
					t.Errorf("%s failing: res %v, err %v", name, res, err)
				}
				if !reflect.DeepEqual(steps.calls, c.steps[:i+1]) {
					t.Errorf("%s failing: steps %q, want %q", name, steps.calls, c.steps[:i+1])
				}
			}
		})
	}
	for a := ledger.ActCreate; a <= ledger.ActMismatch; a++ {
		if !covered[a] {
			t.Errorf("no case for %v", a)
		}
	}
	if _, err := ledger.Execute(context.Background(), ledger.Decision{}, nil, &recSteps{}); err == nil {
		t.Error("an unknown action executes")
	}
}
