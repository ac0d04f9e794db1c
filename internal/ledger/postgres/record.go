package postgres

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemhq/idem/internal/ledger"
)

// recordColumns are a record's columns for scanRecord. Times are read as
// microseconds since the epoch (usTime) and output as hex (hexBytes, in
// outputColumns): the text of a timestamptz or a bytea depends on the
// session's DateStyle and bytea_output, which a role, a database or a
// pooler may set, and exec mode reads results as text.
const recordColumns = `seq, key, fingerprint, command, status, attempts, max_attempts, exit_code, exit_source, token,
	owner_host, owner_boot_id, owner_pidns, owner_pid, owner_start, child_pgid, child_start,
	(extract(epoch FROM lease_expires) * 1e6)::bigint, (extract(epoch FROM created) * 1e6)::bigint,
	(extract(epoch FROM started) * 1e6)::bigint, (extract(epoch FROM updated) * 1e6)::bigint,
	(extract(epoch FROM finished) * 1e6)::bigint, duration_ms, ttl_ms, (extract(epoch FROM expires) * 1e6)::bigint,
	replays, (extract(epoch FROM last_replay) * 1e6)::bigint,
	output_stored, stdout_truncated, stderr_truncated, coalesce(class, ''), coalesce(reason, ''),
	coalesce(run_cwd, ''), coalesce(run_user, ''), ` + ledger.CounterColumns

// outputColumns follow recordColumns where a record's output is read.
const outputColumns = `encode(stdout, 'hex'), encode(stderr, 'hex')`

func scanRecord(row pgx.Row, extra ...any) (*ledger.Record, error) {
	var (
		r                                  ledger.Record
		command                            []byte
		exit                               pgtype.Int4
		dur                                pgtype.Int8
		ttl, pidns, ownerStart, childStart int64
		status                             string
	)
	dest := []any{&r.Seq, &r.Key, &r.Fingerprint, &command, &status, &r.Attempts, &r.MaxAttempts, &exit, &r.ExitSource, &r.Token,
		&r.Owner.Host, &r.Owner.BootID, &pidns, &r.Owner.PID, &ownerStart, &r.Owner.ChildPGID, &childStart, &usTime{&r.LeaseExpiry},
		&usTime{&r.Created}, &usTime{&r.Started}, &usTime{&r.Updated}, &usTime{&r.Finished}, &dur, &ttl, &usTime{&r.Expires},
		&r.Replays, &usTime{&r.LastReplay},
		&r.OutputStored, &r.StdoutTruncated, &r.StderrTruncated, &r.Class, &r.Reason, &r.Cwd, &r.User}
	dest = append(dest, r.Counters.Fields()...)
	if err := row.Scan(append(dest, extra...)...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, ledger.ErrNotFound
		}
		return nil, err
	}
	if err := json.Unmarshal(command, &r.Command); err != nil {
		return nil, fmt.Errorf("record %q: bad command column: %w", r.Key, err)
	}
	r.Status = ledger.Status(status)
	r.ExitCode, r.HasExit = int(exit.Int32), exit.Valid
	r.Owner.PIDNS, r.Owner.StartTime, r.Owner.ChildStart = uint64(pidns), uint64(ownerStart), uint64(childStart)
	r.Duration = time.Duration(dur.Int64) * time.Millisecond
	r.TTL = time.Duration(ttl) * time.Millisecond
	return &r, nil
}

// hexBytes scans bytes the server sent as hex (encode(x, 'hex')); NULL is
// nil.
type hexBytes struct{ b *[]byte }

func (h *hexBytes) Scan(src any) error {
	var err error
	switch v := src.(type) {
	case nil:
		*h.b = nil
	case string:
		*h.b, err = hex.DecodeString(v)
	case []byte:
		*h.b, err = hex.DecodeString(string(v))
	default:
		err = fmt.Errorf("bytes as hex: got %T", src)
	}
	return err
}

// queryRower is a pool or a transaction.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (p *Ledger) getRecord(ctx context.Context, q queryRower, key string, withOutput bool) (*ledger.Record, error) {
	if !withOutput {
		return scanRecord(q.QueryRow(ctx, p.q(`SELECT `+recordColumns+` FROM {schema}.records WHERE key = $1`), key))
	}
	var stdout, stderr []byte
	r, err := scanRecord(q.QueryRow(ctx, p.q(`SELECT `+recordColumns+`, `+outputColumns+` FROM {schema}.records WHERE key = $1`), key),
		&hexBytes{&stdout}, &hexBytes{&stderr})
	if err != nil {
		return nil, err
	}
	r.Stdout, r.Stderr = stdout, stderr
	return r, nil
}

// Get implements Ledger.
func (p *Ledger) Get(ctx context.Context, key string) (*ledger.Record, error) {
	var r *ledger.Record
	err := p.do(ctx, "read", func() error {
		var err error
		r, err = p.getRecord(ctx, p.db, key, true)
		return err
	})
	return r, err
}

// History implements Ledger.
func (p *Ledger) History(ctx context.Context, key string) ([]ledger.Attempt, error) {
	var out []ledger.Attempt
	err := p.do(ctx, "read", func() error {
		out = nil
		rows, err := p.db.Query(ctx, p.q(`SELECT n, token, host, pid, `+epochUS("started")+`, `+epochUS("ended")+`,
			exit_code, class, delay_ms, encode(stderr_tail, 'hex')
			FROM {schema}.attempts WHERE key = $1 ORDER BY id`), key)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				a     ledger.Attempt
				code  pgtype.Int4
				class pgtype.Text
				delay pgtype.Int8
			)
			if err := rows.Scan(&a.N, &a.Token, &a.Host, &a.PID, &usTime{&a.Started}, &usTime{&a.Ended}, &code, &class, &delay,
				&hexBytes{&a.StderrTail}); err != nil {
				return err
			}
			a.ExitCode, a.HasExit = int(code.Int32), code.Valid
			a.Class = class.String
			a.Delay = time.Duration(delay.Int64) * time.Millisecond
			out = append(out, a)
		}
		return rows.Err()
	})
	return out, err
}
