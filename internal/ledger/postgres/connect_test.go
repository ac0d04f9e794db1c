package postgres

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/internal/backoff"
)

// fakeTime is a clock that only sleeping moves.
type fakeTime struct {
	t      time.Time
	slept  []time.Duration
	cancel func() // called at the first sleep, when set
}

func (f *fakeTime) now() time.Time { return f.t }
func (f *fakeTime) sleep(ctx context.Context, d time.Duration) error {
	f.slept = append(f.slept, d)
	f.t = f.t.Add(d)
	if f.cancel != nil {
		f.cancel()
	}
	return ctx.Err()
}

// testConnector's tries return at once: it asks the probe (when one is
// set) only after a failure.
func testConnector(f *fakeTime) connector {
	return connector{budget: 30 * time.Second, policy: backoff.Policy{Initial: time.Second, Multiplier: 2, Max: 8 * time.Second},
		now: f.now, sleep: f.sleep, probeAfter: time.Hour}
}

func TestConnectRetriesWhatPasses(t *testing.T) {
	transient := []error{
		fmt.Errorf("dial: %w", syscall.ECONNREFUSED),
		&pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"},
		&pgconn.PgError{Code: "57P03", Message: "the database system is starting up"},
		fmt.Errorf("connect: %w", context.DeadlineExceeded),
		// PgBouncer's refusals when it or the server behind it is full or down.
		&pgconn.PgError{Code: "08P01", Message: "no more connections allowed (max_client_conn)"},
		&pgconn.PgError{Code: "08P01", Message: "pgbouncer cannot connect to server"},
	}
	for _, fail := range transient {
		f := &fakeTime{t: time.Unix(0, 0)}
		tries := 0
		err := testConnector(f).connect(context.Background(), func(context.Context) error {
			if tries++; tries < 4 {
				return fail
			}
			return nil
		})
		if err != nil || tries != 4 || fmt.Sprint(f.slept) != "[1s 2s 4s]" {
			t.Errorf("%v: err %v after %d tries, slept %v; want success at the 4th, after 1s 2s 4s", fail, err, tries, f.slept)
		}
	}
}

func TestConnectGivesUp(t *testing.T) {
	// For good at once: a wrong password, a missing database.
	for _, fail := range []error{
		&pgconn.PgError{Code: "28P01", Message: "password authentication failed"},
		&pgconn.PgError{Code: "3D000", Message: "database does not exist"},
		errors.New("tls: failed to verify certificate"),
	} {
		f := &fakeTime{t: time.Unix(0, 0)}
		tries := 0
		err := testConnector(f).connect(context.Background(), func(context.Context) error { tries++; return fail })
		if !errors.Is(err, fail) || tries != 1 || len(f.slept) != 0 {
			t.Errorf("%v: err %v after %d tries, slept %v; want it at once", fail, err, tries, f.slept)
		}
	}
	// Within the budget: 1+2+4+8+8 = 23s of sleep; one more would pass 30s.
	f := &fakeTime{t: time.Unix(0, 0)}
	tries := 0
	refused := fmt.Errorf("dial: %w", syscall.ECONNREFUSED)
	err := testConnector(f).connect(context.Background(), func(ctx context.Context) error {
		tries++
		if d, ok := ctx.Deadline(); !ok || d.After(time.Now().Add(30*time.Second)) {
			t.Errorf("try %d: deadline %v, want one within the budget", tries, d)
		}
		return refused
	})
	if !errors.Is(err, refused) || tries != 6 || fmt.Sprint(f.slept) != "[1s 2s 4s 8s 8s]" {
		t.Errorf("err %v after %d tries, slept %v; want refused after 6 tries, 1s 2s 4s 8s 8s", err, tries, f.slept)
	}
	// And by the caller's context (--deadline).
	ctx, cancel := context.WithCancel(context.Background())
	f = &fakeTime{t: time.Unix(0, 0), cancel: cancel}
	tries = 0
	err = testConnector(f).connect(ctx, func(context.Context) error { tries++; return refused })
	if !errors.Is(err, refused) || tries != 1 {
		t.Errorf("cancelled: err %v after %d tries; want refused after 1", err, tries)
	}
}

// A listener that answers as something else fails the connection at the
// first failure, without a retry, whatever the failure was; one that says
// nothing, to the try until its timeout and to the probe, is not tried
// again, and its error says so. A try that failed otherwise (the
// connection closed) beside a silent probe is retried as before.
func TestConnectProbesWhatAnswered(t *testing.T) {
	eof := fmt.Errorf("failed to receive message: %w", io.ErrUnexpectedEOF)
	timeout := fmt.Errorf("connect: %w", context.DeadlineExceeded)
	garbage := errors.New("failed to receive message: invalid body length: expected at most 1073741822, but got 1397239086")
	mismatch := &mismatchError{addr: "db:5432", what: "HTTP"}
	for _, tc := range []struct {
		name        string
		fail, probe error
		want        []error
		tries       int
	}{
		{"mismatch", eof, mismatch, []error{mismatch}, 1},
		{"mismatch-for-good", garbage, mismatch, []error{mismatch}, 1},
		{"postgres-for-good", garbage, nil, []error{garbage}, 1},
		{"silent-timeout", timeout, errSilent, []error{timeout, errSilent}, 1},
		{"silent-eof", eof, errSilent, []error{eof}, 6},
		{"postgres-timeout", timeout, nil, []error{timeout}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeTime{t: time.Unix(0, 0)}
			c := testConnector(f)
			probes, tries := 0, 0
			c.probe = func(context.Context) error { probes++; return tc.probe }
			err := c.connect(context.Background(), func(context.Context) error { tries++; return tc.fail })
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("err %v: want it to be %v", err, w)
				}
			}
			if tc.tries == 1 && errors.Is(err, errSilent) != errors.Is(tc.want[len(tc.want)-1], errSilent) {
				t.Errorf("err %v: errSilent only for a silent port that timed out", err)
			}
			if tries != tc.tries || probes != 1 {
				t.Errorf("%d tries, %d probes; want %d tries, 1 probe", tries, probes, tc.tries)
			}
		})
	}
	// A refusal (nothing listens), a server's own refusal, a name that does
	// not resolve or a certificate is not probed.
	f := &fakeTime{t: time.Unix(0, 0)}
	c := testConnector(f)
	probes := 0
	c.probe = func(context.Context) error { probes++; return mismatch }
	for _, fail := range []error{
		fmt.Errorf("dial: %w", syscall.ECONNREFUSED),
		&pgconn.PgError{Code: "57P03"},
		&pgconn.PgError{Code: "28P01"},
		&net.DNSError{Err: "no such host", Name: "db", IsNotFound: true},
		fmt.Errorf("tls: %w", x509.UnknownAuthorityError{}),
	} {
		c.connect(context.Background(), func(context.Context) error { return fail })
	}
	if probes != 0 {
		t.Errorf("%d probes after refusals, want none", probes)
	}
}

// A try that has not returned within probeAfter (a listener that waits
// for its client to speak first, as an HTTP server does, takes the
// connection and waits for a request line) is probed beside it: what the
// probe finds ends the try at once. When the probe finds PostgreSQL (a
// slow one), the try goes on and its result stands. A try that returns
// in time is never probed.
func TestConnectProbesSlowTry(t *testing.T) {
	mismatch := &mismatchError{addr: "db:5432", what: "HTTP"}
	// hang is a try that returns only when its context ends.
	hang := func(tries *int, cancelled *bool) func(context.Context) error {
		return func(ctx context.Context) error {
			*tries++
			<-ctx.Done()
			*cancelled = true
			return ctx.Err()
		}
	}
	f := &fakeTime{t: time.Unix(0, 0)}
	c := testConnector(f)
	c.probeAfter = 0
	probes, tries, cancelled := 0, 0, false
	c.probe = func(context.Context) error { probes++; return mismatch }
	if err := c.connect(context.Background(), hang(&tries, &cancelled)); !errors.Is(err, mismatch) || tries != 1 || probes != 1 || !cancelled {
		t.Errorf("err %v after %d tries, %d probes (try cancelled: %v); want the mismatch, the one try cancelled", err, tries, probes, cancelled)
	}

	// A slow PostgreSQL: the try goes on after the probe, and succeeds.
	probes, tries = 0, 0
	release := make(chan struct{})
	c.probe = func(context.Context) error { probes++; close(release); return nil }
	err := c.connect(context.Background(), func(ctx context.Context) error {
		tries++
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err != nil || tries != 1 || probes != 1 {
		t.Errorf("err %v after %d tries, %d probes; want success at the first, 1 probe", err, tries, probes)
	}

	// In time: no probe.
	probes = 0
	c.probeAfter = time.Hour
	if err := c.connect(context.Background(), func(context.Context) error { return nil }); err != nil || probes != 0 {
		t.Errorf("err %v, %d probes; want success, no probe", err, probes)
	}
}

func TestAnswered(t *testing.T) {
	for in, want := range map[string]string{
		"S": "", "N": "", "EFATAL": "",
		"HTTP/1.1 400 Bad Request\r\n": "HTTP", "SSH-2.0-OpenSSH_9.2\r\n": "SSH", "\x15\x03\x01\x00\x02": "TLS",
		"220 mail ESMTP\r\n": `"220 mail ESMTP"`,
		// Python's http.server answers a request line without a version
		// (HTTP/0.9) with the page alone.
		"<!DOCTYPE HTML>\n<html lang=\"en\">": "HTTP", "<html><body>": "HTTP",
	} {
		err := answered("db:5432", []byte(in))
		var m *mismatchError
		got := ""
		if errors.As(err, &m) {
			got = m.what
		}
		if !strings.HasPrefix(got, want) || (want == "") != (err == nil) {
			t.Errorf("answered(%q) = %v, want %q", in, err, want)
		}
	}
}
