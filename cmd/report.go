package cmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/runner"
)

// reportSchema is the "schema_version" of --report files. The README
// documents every field; add fields, never rename or remove them.
const reportSchema = 1

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
	if err != nil {
		code, msg, _ := explain(err)
		r.Status, r.ExitCode, r.Source, r.Error = "error", code, string(exitcode.SourceIdem), &msg
		return r
	}
	r.Status, r.Replayed, r.Attempts, r.ExitCode = string(res.Status), res.Replayed, res.Attempts, code
	r.Truncated = res.StdoutTruncated || res.StderrTruncated
	r.Source = string(res.Source)
	return r
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
