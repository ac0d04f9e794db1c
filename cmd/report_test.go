package cmd

import (
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/runner"
)

func TestBuildReport(t *testing.T) {
	started := time.Date(2026, 12, 2, 3, 17, 0, 0, time.UTC)
	finished := started.Add(1500 * time.Millisecond)
	for _, tc := range []struct {
		name   string
		res    *runner.Result
		code   int
		err    error
		status string
		source exitcode.Source
		want   int
		reason string
	}{
		{"ran", &runner.Result{Status: ledger.StatusSucceeded, Attempts: 1, Source: exitcode.SourceChild}, 0, nil,
			"succeeded", exitcode.SourceChild, 0, ""},
		{"timed out", &runner.Result{Status: ledger.StatusFailed, Attempts: 3, ExitCode: 124, Source: exitcode.SourceIdem, TimedOut: true}, 124, nil,
			"failed", exitcode.SourceIdem, 124, "timeout"},
		{"timed out, replayed", &runner.Result{Status: ledger.StatusFailed, Replayed: true, Attempts: 1, ExitCode: 124, Source: exitcode.SourceIdem,
			Record: &ledger.Record{Class: ledger.ClassTimeout}}, 124, nil, "failed", exitcode.SourceIdem, 124, "timeout"},
		{"interrupted, replayed", &runner.Result{Status: ledger.StatusFailed, Replayed: true, Attempts: 1, ExitCode: 143, Source: exitcode.SourceIdem,
			Record: &ledger.Record{Class: ledger.ClassInterrupted}}, 143, nil, "failed", exitcode.SourceIdem, 143, "interrupted"},
		{"the command's 124, replayed", &runner.Result{Status: ledger.StatusFailed, Replayed: true, Attempts: 1, ExitCode: 124, Source: exitcode.SourceChild,
			Record: &ledger.Record{Class: ledger.ClassPermanent}}, 124, nil, "failed", exitcode.SourceChild, 124, ""},
		{"replayed", &runner.Result{Status: ledger.StatusFailed, Replayed: true, Attempts: 1, ExitCode: 2, Source: exitcode.SourceChild}, 2, nil,
			"failed", exitcode.SourceChild, 2, ""},
		{"usage", nil, 0, usagef("", "missing --key"), "error", exitcode.SourceIdem, exitcode.Usage, "usage"},
		{"unknown error", nil, 0, errors.New("boom"), "error", exitcode.SourceIdem, exitcode.Software, "internal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := buildReport("evt:report:1", tc.res, tc.code, tc.err, started, finished)
			if r.Status != tc.status || r.Source != string(tc.source) || r.ExitCode != tc.want || r.DurationMS != 1500 ||
				(tc.err != nil) != (r.Error != nil) {
				t.Fatalf("buildReport = %+v; want status %s, source %s, exit %d", r, tc.status, tc.source, tc.want)
			}
			if got := ""; r.Reason != nil && *r.Reason != tc.reason || r.Reason == nil && tc.reason != "" {
				if r.Reason != nil {
					got = *r.Reason
				}
				t.Fatalf("buildReport's reason = %q; want %q", got, tc.reason)
			}
		})
	}
}
