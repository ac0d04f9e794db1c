package cmd

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/runner"
)

// reportSchema is the "schema_version" of --report files. docs/operators.md
// documents every field; add fields, never rename or remove them.
const reportSchema = 2

// reportJSON is the --report file: what one `idem run` invocation did.
type reportJSON struct {
	SchemaVersion int    `json:"schema_version"`
	Key           string `json:"key"`
	// Status is the record's status after a run or replay, or "error" when
	// idem stopped with an error of its own (Error says which).
	Status   string `json:"status"`
	Replayed bool   `json:"replayed"`
	// Attempts is the number of attempts on the record, across invocations
	// (0 after an error).
	Attempts int `json:"attempts"`
	// ExitCode is idem's own exit status; Source says whose code it is.
	ExitCode   int     `json:"exit_code"`
	Source     string  `json:"source"`
	Started    string  `json:"started"`
	Finished   string  `json:"finished"`
	DurationMS int64   `json:"duration_ms"`
	Truncated  bool    `json:"truncated"`
	Error      *string `json:"error"`

	// Schema 2.

	// Reason names why idem chose the exit status itself (see
	// reasonOf and docs/operators.md), or is null when it is the command's.
	Reason *string `json:"reason"`
	// Ledger is the ledger used (a path, or a DSN without its password);
	// null when none could be named.
	Ledger  *string  `json:"ledger"`
	Command []string `json:"command"`
	// AttemptsRun is the attempts this invocation started (Attempts is
	// the record's total).
	AttemptsRun int `json:"attempts_run"`
	// Recorded is, for a replay, when the earlier run recorded the
	// outcome replayed; null otherwise.
	Recorded *string `json:"recorded"`
}

// checkReport refuses a --report path that cannot be written, before
// anything runs.
func checkReport(path string) error {
	if path == "" {
		return nil
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return usagef("name a file for --report", "--report %s is a directory", path)
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return usagef("create the directory first", "--report %s: directory %s does not exist", path, dir)
	}
	return nil
}

// writeReport writes the --report file. One that cannot be written is a
// warning: the command's exit status stands.
func writeReport(a *app, path string, r reportJSON) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err == nil {
		err = writeAtomic(path, append(b, '\n'))
	}
	if err != nil {
		u := a.ui
		if u == nil {
			u = newUI(a)
		}
		u.warnf("cannot write --report %s: %v", path, err)
	}
}

// buildReport summarises one `idem run` from what runRun returned: the
// runner's result and idem's exit code, or the error that stopped it.
func buildReport(key string, res *runner.Result, code int, err error, started, finished time.Time) reportJSON {
	r := reportJSON{SchemaVersion: reportSchema, Key: key, Started: jsonTime(started), Finished: jsonTime(finished),
		DurationMS: finished.Sub(started).Milliseconds()}
	r.Command = []string{}
	if err != nil {
		code, msg, _ := explain(err)
		reason := reasonOf(err)
		r.Status, r.ExitCode, r.Source, r.Error, r.Reason = "error", code, string(exitcode.SourceIdem), &msg, &reason
		return r
	}
	r.Status, r.Replayed, r.Attempts, r.ExitCode = string(res.Status), res.Replayed, res.Attempts, code
	r.Truncated = res.StdoutTruncated || res.StderrTruncated
	r.Source = string(res.Source)
	r.AttemptsRun = res.Ran
	// A replay's reason is the one the run that recorded the outcome
	// reported: its attempt's class says what that run saw.
	class := ""
	if res.Replayed && res.Record != nil {
		class = res.Record.Class
	}
	var reason string
	switch {
	case res.Signal != 0 || class == ledger.ClassInterrupted:
		reason = "interrupted"
	case (res.TimedOut || class == ledger.ClassTimeout) && res.Source == exitcode.SourceIdem:
		reason = "timeout"
	}
	if reason != "" {
		r.Reason = &reason
	}
	if res.Replayed && res.Record != nil && !res.Record.Finished.IsZero() {
		s := jsonTime(res.Record.Finished)
		r.Recorded = &s
	}
	return r
}

// reasonOf names an error of idem's own for --report: usage, key_reuse,
// ledger_io, busy, wait_timeout, deadline, interrupted, lease_lost,
// not_found, not_executable, or internal.
func reasonOf(err error) string {
	if ee := (*exitError)(nil); errors.As(err, &ee) && ee.reason != "" {
		return ee.reason
	}
	code, _, _ := explain(err)
	switch code {
	case exitcode.Usage:
		return "usage"
	case exitcode.DataErr:
		return "key_reuse"
	case exitcode.IOErr:
		return "ledger_io"
	case exitcode.TempFail:
		return "busy"
	case exitcode.CannotExec:
		return "not_executable"
	case exitcode.NotFound:
		return "not_found"
	}
	return "internal"
}

// ledgerDescription names the ledger for --report: an absolute path, or
// a PostgreSQL DSN without its password; nil when it cannot be named.
func (a *app) ledgerDescription() *string {
	loc, err := a.ledgerPath()
	if err != nil {
		return nil
	}
	s := a.describe(loc)
	return &s
}

// writeAtomic replaces path with data: a temporary file in the same
// directory, synced, then renamed over it, so that readers see the old file
// or the whole new one.
func writeAtomic(path string, data []byte) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
