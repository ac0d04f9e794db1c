package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
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

func testConnector(f *fakeTime) connector {
	return connector{budget: 30 * time.Second, policy: backoff.Policy{Initial: time.Second, Multiplier: 2, Max: 8 * time.Second},
		now: f.now, sleep: f.sleep}
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
// first failure, without a retry; one that says nothing is retried as
// before, and its error says so.
func TestConnectProbesWhatAnswered(t *testing.T) {
	eof := fmt.Errorf("failed to receive message: %w", io.ErrUnexpectedEOF)
	mismatch := &mismatchError{addr: "db:5432", what: "HTTP"}
	f := &fakeTime{t: time.Unix(0, 0)}
	c := testConnector(f)
	probes, tries := 0, 0
	c.probe = func(context.Context) error { probes++; return mismatch }
	err := c.connect(context.Background(), func(context.Context) error { tries++; return eof })
	if !errors.Is(err, mismatch) || tries != 1 || probes != 1 || len(f.slept) != 0 {
		t.Errorf("err %v after %d tries, %d probes, slept %v; want the mismatch at once", err, tries, probes, f.slept)
	}
	f = &fakeTime{t: time.Unix(0, 0)}
	c = testConnector(f)
	probes, tries = 0, 0
	c.probe = func(context.Context) error { probes++; return errSilent }
	err = c.connect(context.Background(), func(context.Context) error { tries++; return eof })
	if !errors.Is(err, eof) || !errors.Is(err, errSilent) || tries != 6 || probes != 1 {
		t.Errorf("err %v after %d tries, %d probes; want EOF and errSilent after 6 tries, 1 probe", err, tries, probes)
	}
	// A refusal (nothing listens) or a server's own refusal is not probed.
	probes = 0
	c.probe = func(context.Context) error { probes++; return mismatch }
	c.connect(context.Background(), func(context.Context) error { return fmt.Errorf("dial: %w", syscall.ECONNREFUSED) })
	c.connect(context.Background(), func(context.Context) error { return &pgconn.PgError{Code: "57P03"} })
	if probes != 0 {
		t.Errorf("%d probes after refusals, want none", probes)
	}
}

func TestAnswered(t *testing.T) {
	for in, want := range map[string]string{
		"S": "", "N": "", "EFATAL": "",
		"HTTP/1.1 400 Bad Request\r\n": "HTTP", "SSH-2.0-OpenSSH_9.2\r\n": "SSH", "\x15\x03\x01\x00\x02": "TLS",
		"220 mail ESMTP\r\n": `"220 mail ESMTP"`,
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
