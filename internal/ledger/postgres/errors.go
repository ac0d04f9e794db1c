package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/internal/ledger"
)

// do runs fn, retrying a bounded number of times when PostgreSQL reports a
// serialization failure, a deadlock or a unique violation (the transaction
// it collided with has ended by then), and wraps the error.
func (p *Ledger) do(ctx context.Context, op string, fn func() error) error {
	var err error
	for try := 0; try < retries; try++ {
		err = fn()
		if !retryable(err) || ctx.Err() != nil {
			break
		}
	}
	return p.wrap(op, err)
}

func retryable(err error) bool {
	switch sqlState(err) {
	case "40001", "40P01", "23505":
		return true
	}
	return err != nil && pgconn.SafeToRetry(err)
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// wrap turns driver errors into *StoreError and passes contract errors on.
func (p *Ledger) wrap(op string, err error) error {
	var (
		mismatch *ledger.MismatchError
		se       *ledger.StoreError
		pe       *pgconn.PgError
		ce       *pgconn.ConnectError
	)
	switch {
	case err == nil, errors.Is(err, ledger.ErrNotFound), errors.Is(err, ledger.ErrLeaseLost), errors.As(err, &mismatch), errors.As(err, &se):
		return err
	case errors.As(err, &ce):
		// Before the context's errors: a connect timeout is one.
		return p.connectError(err)
	case errors.Is(err, context.DeadlineExceeded) && ownerWrite(op):
		// The server took the statement and did not finish it in time:
		// a row lock someone holds, or a server that stopped answering.
		return &ledger.StoreError{Op: op, Path: p.desc, Err: fmt.Errorf("PostgreSQL at %s did not finish the write in time: %w", p.addr, err),
			Hint: "a transaction may hold the key's row lock: look for it in pg_stat_activity (wait_event_type Lock, or a long idle in transaction), or check that the server answers"}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &pe):
		return p.serverError(op, pe)
	}
	if connLost(err) {
		return &ledger.StoreError{Op: op, Path: p.desc,
			Err:  &lostError{addr: p.addr, why: cause(err), err: err},
			Hint: "check that PostgreSQL is running and reachable from this host"}
	}
	return &ledger.StoreError{Op: op, Path: p.desc, Err: err}
}

// ownerWrite reports whether op is one of a reservation's owner's writes
// (everything after Reserve): its deadline is the runner's own, not the
// user's --deadline, so running out of it is the ledger's failure.
func ownerWrite(op string) bool {
	switch op {
	case "record child", "renew lease", "record attempt", "start attempt", "record outcome", "release":
		return true
	}
	return false
}

// connLost reports whether err is the connection failing under us (EOF,
// reset, timeout, closed) rather than a query's own error.
func connLost(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, pgconn.ErrConnClosed) ||
		pgconn.Timeout(err)
}

func (p *Ledger) serverError(op string, pe *pgconn.PgError) error {
	se := &ledger.StoreError{Op: op, Path: p.desc, Err: fmt.Errorf("%s (SQLSTATE %s)", pe.Message, pe.Code)}
	switch {
	case strings.HasPrefix(pe.Code, "08"), pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03":
		se.Err = &lostError{addr: p.addr, why: pe.Message, err: pe}
		se.Hint = "check that PostgreSQL is running and reachable from this host"
	case pe.Code == "42501":
		se.Hint = fmt.Sprintf("grant this role the use of the ledger in schema %q: 'idem schema --grant ROLE' prints the grants", p.schema)
	case pe.Code == "42704": // undefined object: only a role is named by the user
		se.Hint = "create that role first (CREATE ROLE NAME LOGIN), or name an existing one"
	case pe.Code == "25006":
		se.Hint = "point --ledger at the primary server, not a read-only standby"
	case pe.Code == "53100":
		se.Hint = "free space on the database server"
	case pe.Code == "40001", pe.Code == "40P01", pe.Code == "55P03":
		se.Hint = "retry; if it persists, look for a long transaction holding the ledger's rows"
	}
	return se
}

// lostError is the connection to the server failing under a statement,
// which may or may not have committed.
type lostError struct {
	addr, why string
	err       error
}

func (e *lostError) Error() string {
	return fmt.Sprintf("lost the connection to PostgreSQL at %s: %s", e.addr, e.why)
}

func (e *lostError) Unwrap() error { return e.err }
