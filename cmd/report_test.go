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
	}{
		{"ran", &runner.Result{Status: ledger.StatusSucceeded, Attempts: 1, Source: exitcode.SourceChild}, 0, nil,
			"succeeded", exitcode.SourceChild, 0},
		{"timed out", &runner.Result{Status: ledger.StatusFailed, Attempts: 3, ExitCode: 124, Source: exitcode.SourceIdem, TimedOut: true}, 124, nil,
			"failed", exitcode.SourceIdem, 124},
		{"replayed", &runner.Result{Status: ledger.StatusFailed, Replayed: true, Attempts: 1, ExitCode: 2, Source: exitcode.SourceChild}, 2, nil,
			"failed", exitcode.SourceChild, 2},
		{"usage", nil, 0, usagef("", "missing --key"), "error", exitcode.SourceIdem, exitcode.Usage},
		{"unknown error", nil, 0, errors.New("boom"), "error", exitcode.SourceIdem, exitcode.Software},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := buildReport("evt:report:1", tc.res, tc.code, tc.err, started, finished)
			if r.Status != tc.status || r.Source != string(tc.source) || r.ExitCode != tc.want || r.DurationMS != 1500 ||
				(tc.err != nil) != (r.Error != nil) {
				t.Fatalf("buildReport = %+v; want status %s, source %s, exit %d", r, tc.status, tc.source, tc.want)
			}
		})
	}
}
