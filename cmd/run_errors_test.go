package cmd

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/runner"
)

// TestLeaseErrors: the exit table of a lease lost without another run
// taking the key. A pause of idem is 75 and says so; failed renewals are
// 74 with the backend's hint, or with one that holds for every ledger (not
// SQLite's "disk and permissions" for a PostgreSQL server); the message
// says whether the command was stopped, had ended on its own or was not
// running, and what became of the key.
func TestLeaseErrors(t *testing.T) {
	o := runner.Options{Key: "lease:errors", Lease: 2 * time.Second}
	pg := &ledger.StoreError{Op: "renew the lease", Path: "postgres://h/db", Err: errors.New("lost the connection to PostgreSQL at h:5432: EOF"),
		Hint: "check that PostgreSQL is running and reachable from this host"}
	slow := &ledger.StoreError{Op: "renew the lease", Path: "postgres://h/db", Err: errors.New("did not answer in time")}
	for _, c := range []struct {
		name       string
		err        *runner.LeaseLapsedError
		code       int
		msg, hint  string
		notInThere string
	}{
		{"paused in a backoff", &runner.LeaseLapsedError{Paused: true, Released: true}, exitcode.TempFail,
			`key "lease:errors": the lease lapsed while idem was paused (stopped or suspended) for longer than it allows; no command was running; the key was given back as retryable`,
			"a paused idem cannot keep its lease: resume it within --lease (it was 2s), or raise --lease", ""},
		{"paused while running", &runner.LeaseLapsedError{Paused: true, Stopped: true}, exitcode.TempFail,
			"the command was stopped; the key stays in progress until its lease expires", "", ""},
		{"server gone", &runner.LeaseLapsedError{Err: pg, Stopped: true, Released: true}, exitcode.IOErr,
			"could not renew the lease: ledger postgres://h/db: renew the lease: lost the connection to PostgreSQL at h:5432: EOF; the command was stopped; the key was given back as retryable",
			"check that PostgreSQL is running and reachable from this host", ""},
		{"no answer in a backoff", &runner.LeaseLapsedError{Err: slow}, exitcode.IOErr,
			"did not answer in time; no command was running; the key stays in progress",
			"check that the ledger is reachable and writable, and look for a long transaction holding its rows", "disk and permissions"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ee *exitError
			if !errors.As(runError(c.err, o, time.Now()), &ee) {
				t.Fatalf("not an exitError")
			}
			if ee.code != c.code || !strings.Contains(ee.msg, c.msg) || !strings.Contains(ee.hint, c.hint) {
				t.Errorf("exit %d, %q, hint %q; want %d, %q, hint %q", ee.code, ee.msg, ee.hint, c.code, c.msg, c.hint)
			}
			if c.notInThere != "" && strings.Contains(ee.msg+ee.hint, c.notInThere) {
				t.Errorf("%q in %q / %q", c.notInThere, ee.msg, ee.hint)
			}
			if ee.reason != "" && ee.reason != "lease_lost" {
				t.Errorf("reason %q", ee.reason)
			}
		})
	}
}
