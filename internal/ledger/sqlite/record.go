package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// ms converts a time to Unix milliseconds; the zero time maps to NULL.
func ms(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
}

func fromMS(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.UnixMilli(n.Int64)
}

const recordColumns = `rowid, key, fingerprint, command, status, attempts, max_attempts, exit_code, exit_source, token,
	owner_host, owner_boot_id, owner_pidns, owner_pid, owner_start, child_pgid, child_start, lease_expires_ms,
	created_ms, started_ms, updated_ms, finished_ms, duration_ms, ttl_ms, expires_ms, replays, last_replay_ms,
	output_stored, stdout_truncated, stderr_truncated, coalesce(class, ''), coalesce(reason, ''),
	coalesce(run_cwd, ''), coalesce(run_user, ''), ` + ledger.CounterColumns

type scanner interface{ Scan(...any) error }

func scanRecord(row scanner, extra ...any) (*ledger.Record, error) {
	var (
		r                                ledger.Record
		command                          string
		exit, finished, dur, exp, replay sql.NullInt64
		lease, created, started, updated int64
		ttl                              int64
		pidns, ownerStart, childStart    int64
		stored, outTrunc, errTrunc       bool
	)
	dest := []any{&r.Seq, &r.Key, &r.Fingerprint, &command, &r.Status, &r.Attempts, &r.MaxAttempts, &exit, &r.ExitSource, &r.Token,
		&r.Owner.Host, &r.Owner.BootID, &pidns, &r.Owner.PID, &ownerStart, &r.Owner.ChildPGID, &childStart, &lease,
		&created, &started, &updated, &finished, &dur, &ttl, &exp, &r.Replays, &replay,
		&stored, &outTrunc, &errTrunc, &r.Class, &r.Reason, &r.Cwd, &r.User}
	dest = append(dest, r.Counters.Fields()...)
	if err := row.Scan(append(dest, extra...)...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ledger.ErrNotFound
		}
		return nil, err
	}
	if err := json.Unmarshal([]byte(command), &r.Command); err != nil {
		return nil, fmt.Errorf("record %q: bad command column: %w", r.Key, err)
	}
	r.ExitCode, r.HasExit = int(exit.Int64), exit.Valid
	r.Owner.PIDNS, r.Owner.StartTime, r.Owner.ChildStart = uint64(pidns), uint64(ownerStart), uint64(childStart)
	r.LeaseExpiry = time.UnixMilli(lease)
	r.Created, r.Started, r.Updated = time.UnixMilli(created), time.UnixMilli(started), time.UnixMilli(updated)
	r.Finished, r.Expires, r.LastReplay = fromMS(finished), fromMS(exp), fromMS(replay)
	r.Duration = time.Duration(dur.Int64) * time.Millisecond
	r.TTL = time.Duration(ttl) * time.Millisecond
	r.OutputStored, r.StdoutTruncated, r.StderrTruncated = stored, outTrunc, errTrunc
	return &r, nil
}

// querier runs statements: the ledger's connection, inside a write
// transaction (see writeOnce) or not, and a read-only *sql.Tx.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func getRecord(ctx context.Context, q querier, key string, withOutput bool) (*ledger.Record, error) {
	if !withOutput {
		return scanRecord(q.QueryRowContext(ctx, `SELECT `+recordColumns+` FROM records WHERE key = ?`, key))
	}
	return scanWithOutput(q.QueryRowContext(ctx, `SELECT `+recordColumns+`, `+outputSQL("stdout")+`, `+outputSQL("stderr")+`
		FROM records WHERE key = ?`, key))
}

// outputSQL is a records query's expression for a column of the record's
// output: its outputs row, written by the outcome (see schema_v4.sql);
// empty when the record has none, NULL when no output was stored.
func outputSQL(col string) string {
	return `CASE WHEN output_stored THEN coalesce((SELECT o.` + col + ` FROM outputs o WHERE o.key = records.key), x'') END`
}

// readOutput reads the output of rec, a final record as a replay reads
// it (see outputSQL), in the transaction that read rec: a statement of
// its own, which only a replay runs, so that a run's reservation reads
// the record without it.
func readOutput(ctx context.Context, q querier, rec *ledger.Record) error {
	if !rec.OutputStored {
		return nil
	}
	err := q.QueryRowContext(ctx, `SELECT coalesce(stdout, x''), coalesce(stderr, x'') FROM outputs WHERE key = ?`, rec.Key).
		Scan(&rec.Stdout, &rec.Stderr)
	if errors.Is(err, sql.ErrNoRows) {
		rec.Stdout, rec.Stderr = nil, nil // as an empty blob reads
		return nil
	}
	return err
}

func scanWithOutput(row scanner) (*ledger.Record, error) {
	var stdout, stderr []byte
	r, err := scanRecord(row, &stdout, &stderr)
	if err != nil {
		return nil, err
	}
	r.Stdout, r.Stderr = stdout, stderr
	return r, nil
}

func nullCode(code int, ok bool) sql.NullInt64 {
	return sql.NullInt64{Int64: int64(code), Valid: ok}
}

// Get implements Ledger.
func (s *Ledger) Get(ctx context.Context, key string) (*ledger.Record, error) {
	r, err := getRecord(ctx, s.conn, key, true)
	return r, s.wrap("read", err)
}

// History implements Ledger.
func (s *Ledger) History(ctx context.Context, key string) ([]ledger.Attempt, error) {
	rows, err := s.conn.QueryContext(ctx, `SELECT n, token, host, pid, started_ms, ended_ms, exit_code, class, delay_ms, stderr_tail
		FROM attempts WHERE key = ? ORDER BY id`, key)
	if err != nil {
		return nil, s.wrap("read", err)
	}
	defer rows.Close()
	var out []ledger.Attempt
	for rows.Next() {
		var (
			a              ledger.Attempt
			started        int64
			ended, code, d sql.NullInt64
			class          sql.NullString
		)
		if err := rows.Scan(&a.N, &a.Token, &a.Host, &a.PID, &started, &ended, &code, &class, &d, &a.StderrTail); err != nil {
			return nil, s.wrap("read", err)
		}
		a.Started, a.Ended = time.UnixMilli(started), fromMS(ended)
		a.ExitCode, a.HasExit = int(code.Int64), code.Valid
		a.Class = class.String
		a.Delay = time.Duration(d.Int64) * time.Millisecond
		out = append(out, a)
	}
	return out, s.wrap("read", rows.Err())
}
