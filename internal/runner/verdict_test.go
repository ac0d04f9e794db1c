package runner

import (
	"syscall"
	"testing"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/flagval"
	"github.com/idemhq/idem/internal/ledger"
)

// TestVerdict: how an attempt's exit becomes its class and the status it
// leaves the key in, the budget rule included.
func TestVerdict(t *testing.T) {
	mustCodes := func(s string) flagval.CodeSet {
		c, err := flagval.ParseCodes(s)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	defaults := Options{Success: DefaultSuccessCodes(), Transient: DefaultTransientCodes(), MaxAttempts: 3}
	custom := Options{Success: mustCodes("0,3"), Transient: mustCodes("75,100-110"), MaxAttempts: 3}
	both := Options{Success: mustCodes("0,75"), Transient: mustCodes("75"), MaxAttempts: 3}
	for _, tc := range []struct {
		name     string
		o        Options
		in       attemptEnd
		tty      int
		wantCode int
		class    string
		signal   syscall.Signal
		timedOut bool
		n        int // the attempt, of 3
		status   ledger.Status
		final    bool
	}{
		{"zero succeeds", defaults, attemptEnd{code: 0}, -1, 0, ledger.ClassSuccess, 0, false, 1, ledger.StatusSucceeded, true},
		{"75 is transient", defaults, attemptEnd{code: 75}, -1, 75, ledger.ClassTransient, 0, false, 1, ledger.StatusRetryable, false},
		{"1 is permanent", defaults, attemptEnd{code: 1}, -1, 1, ledger.ClassPermanent, 0, false, 1, ledger.StatusFailed, true},
		{"unknown codes are permanent", defaults, attemptEnd{code: 76}, -1, 76, ledger.ClassPermanent, 0, false, 1, ledger.StatusFailed, true},
		{"127 from the child is permanent", defaults, attemptEnd{code: 127}, -1, 127, ledger.ClassPermanent, 0, false, 1, ledger.StatusFailed, true},
		{"the child's own 124 is classified like any code", defaults, attemptEnd{code: 124}, -1, 124, ledger.ClassPermanent, 0, false, 1, ledger.StatusFailed, true},
		{"a signal death is 128+N, permanent", defaults, attemptEnd{code: 137}, -1, 137, ledger.ClassPermanent, 0, false, 1, ledger.StatusFailed, true},
		{"listed success code", custom, attemptEnd{code: 3}, -1, 3, ledger.ClassSuccess, 0, false, 1, ledger.StatusSucceeded, true},
		{"transient range", custom, attemptEnd{code: 105}, -1, 105, ledger.ClassTransient, 0, false, 1, ledger.StatusRetryable, false},
		{"past the range", custom, attemptEnd{code: 111}, -1, 111, ledger.ClassPermanent, 0, false, 1, ledger.StatusFailed, true},
		{"success wins over transient", both, attemptEnd{code: 75}, -1, 75, ledger.ClassSuccess, 0, false, 1, ledger.StatusSucceeded, true},
		{"stopped by timeout: 124, timeout", defaults, attemptEnd{code: 143, timedOut: true}, -1, 124, ledger.ClassTimeout, 0, true, 1, ledger.StatusRetryable, false},
		{"timeout whatever the code", custom, attemptEnd{code: 75, timedOut: true}, -1, 124, ledger.ClassTimeout, 0, true, 1, ledger.StatusRetryable, false},
		{"success during the grace is success", defaults, attemptEnd{code: 0, timedOut: true}, -1, 0, ledger.ClassSuccess, 0, false, 1, ledger.StatusSucceeded, true},
		{"interrupted", defaults, attemptEnd{code: 130, signal: syscall.SIGINT}, -1, 130, ledger.ClassInterrupted, syscall.SIGINT, false, 1, ledger.StatusRetryable, true},
		{"interrupted while timed out", defaults, attemptEnd{code: 143, signal: syscall.SIGTERM, timedOut: true}, -1, 143, ledger.ClassInterrupted, syscall.SIGTERM, false, 1, ledger.StatusRetryable, true},
		{"success despite the signal: it happened", defaults, attemptEnd{code: 0, signal: syscall.SIGTERM}, -1, 0, ledger.ClassSuccess, 0, false, 1, ledger.StatusSucceeded, true},
		{"Ctrl-C at the terminal reached only the child", defaults, attemptEnd{code: 130}, 0, 130, ledger.ClassInterrupted, syscall.SIGINT, false, 1, ledger.StatusRetryable, true},
		{"130 without a terminal is the child's own", defaults, attemptEnd{code: 130}, -1, 130, ledger.ClassPermanent, 0, false, 1, ledger.StatusFailed, true},
		{"stopped at the deadline: retryable, no next attempt", defaults, attemptEnd{code: 143, timedOut: true, byDeadline: true}, -1, 124, ledger.ClassTimeout, 0, true, 1, ledger.StatusRetryable, true},
		{"a transient failure before the last attempt goes on", defaults, attemptEnd{code: 75}, -1, 75, ledger.ClassTransient, 0, false, 2, ledger.StatusRetryable, false},
		{"the budget wins over a transient failure", defaults, attemptEnd{code: 75}, -1, 75, ledger.ClassTransient, 0, false, 3, ledger.StatusFailed, true},
		{"the budget wins over a timeout", defaults, attemptEnd{code: 143, timedOut: true}, -1, 124, ledger.ClassTimeout, 0, true, 3, ledger.StatusFailed, true},
		{"the budget wins over an interruption", defaults, attemptEnd{code: 130, signal: syscall.SIGINT}, -1, 130, ledger.ClassInterrupted, syscall.SIGINT, false, 3, ledger.StatusFailed, true},
		{"the budget wins over the deadline", defaults, attemptEnd{code: 143, timedOut: true, byDeadline: true}, -1, 124, ledger.ClassTimeout, 0, true, 3, ledger.StatusFailed, true},
		{"a success on the last attempt", defaults, attemptEnd{code: 0}, -1, 0, ledger.ClassSuccess, 0, false, 3, ledger.StatusSucceeded, true},
		{"past the budget (an abandoned attempt counted)", defaults, attemptEnd{code: 75}, -1, 75, ledger.ClassTransient, 0, false, 4, ledger.StatusFailed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			end := tc.in
			end.tty = tc.tty >= 0
			status, final := verdict(&end, tc.o, tc.n)
			if end.code != tc.wantCode || end.class != tc.class || end.signal != tc.signal || end.timedOut != tc.timedOut {
				t.Errorf("verdict(%+v) = code %d class %s signal %v timedOut %v; want %d %s %v %v",
					tc.in, end.code, end.class, end.signal, end.timedOut, tc.wantCode, tc.class, tc.signal, tc.timedOut)
			}
			if status != tc.status || final != tc.final {
				t.Errorf("verdict(%+v) at attempt %d of 3 = %s, final %v; want %s, final %v",
					tc.in, tc.n, status, final, tc.status, tc.final)
			}
		})
	}
}

func TestResultExit(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  Result
		want int
	}{
		{"child", Result{ExitCode: 3, Source: exitcode.SourceChild}, 3},
		{"timeout", Result{ExitCode: exitcode.Timeout, Source: exitcode.SourceIdem, TimedOut: true}, 124},
		{"interrupted", Result{ExitCode: 143, Source: exitcode.SourceIdem, Signal: syscall.SIGINT}, 130},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.res.Exit(); got != tc.want {
				t.Fatalf("Exit() = %d, want %d", got, tc.want)
			}
		})
	}
}
