package postgres

import (
	"context"
	"errors"
	"fmt"
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
