package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/ledger"
)

// fencedCount turns the row count of an owner's write into ErrLeaseLost.
func fencedCount(n int64, err error) error {
	if err != nil {
		return err
	}
	if n == 0 {
		return ledger.ErrLeaseLost
	}
	return nil
}

func (p *Ledger) execFenced(ctx context.Context, op, sql string, args ...any) error {
	return p.do(ctx, op, func() error {
		tag, err := p.db.Exec(ctx, sql, args...)
		return fencedCount(tag.RowsAffected(), err)
	})
}

// countFenced runs a statement whose single row is the number of records
// the fenced write touched.
func (p *Ledger) countFenced(ctx context.Context, op, sql string, args ...any) error {
	return p.do(ctx, op, func() error {
		var n int64
		err := p.db.QueryRow(ctx, sql, args...).Scan(&n)
		return fencedCount(n, err)
	})
}

// SetChild implements Ledger.
func (p *Ledger) SetChild(ctx context.Context, key string, token int64, pgid int, start uint64) error {
	return p.execFenced(ctx, "record child", p.q(`WITH c AS (SELECT pg_catalog.set_config('synchronous_commit', $5, true))
		UPDATE {schema}.records SET child_pgid = $3, child_start = $4 FROM c WHERE key = $1 AND token = $2`),
		key, token, pgid, int64(start), p.asyncCommit)
}

// Renew implements Ledger: the lease runs from the server's clock.
func (p *Ledger) Renew(ctx context.Context, key string, token int64, lease time.Duration) error {
	return p.execFenced(ctx, "renew lease", p.q(`WITH c AS (SELECT `+nowSQL(4)+` AS now, pg_catalog.set_config('synchronous_commit', $5, true) AS sync)
		UPDATE {schema}.records SET lease_expires = c.now + $3::bigint * interval '1 microsecond', updated = c.now FROM c
		WHERE key = $1 AND token = $2`), key, token, micros(lease), p.now(), p.asyncCommit)
}

// EndAttempt implements Ledger, in one statement.
func (p *Ledger) EndAttempt(ctx context.Context, e ledger.AttemptEnd) error {
	return p.countFenced(ctx, "record attempt", p.q(`WITH c AS (SELECT `+nowSQL(7)+` AS now, pg_catalog.set_config('synchronous_commit', $10, true) AS sync),
		r AS (UPDATE {schema}.records SET exit_code = $4, exit_source = 'child', updated = c.now, class = $5, reason = $8`+ledger.BumpSQL(e.Class, "")+` FROM c
			WHERE key = $1 AND token = $2 RETURNING c.now),
		a AS (UPDATE {schema}.attempts SET ended = r.now, exit_code = $4, class = $5, delay_ms = $6, stderr_tail = $9 FROM r
			WHERE id = $3 AND attempts.key = $1)
		SELECT count(*) FROM r`), e.Key, e.Token, e.AttemptID, e.ExitCode, e.Class, e.Delay.Milliseconds(), p.now(),
		ledger.ReasonArg(e.StderrTail), ledger.Tail(e.StderrTail), p.asyncCommit)
}

// StartAttempt implements Ledger, in one statement.
func (p *Ledger) StartAttempt(ctx context.Context, key string, token int64, lease time.Duration) (int, int64, error) {
	var (
		n  int
		id int64
	)
	err := p.do(ctx, "start attempt", func() error {
		err := p.db.QueryRow(ctx, p.q(`WITH c AS (SELECT `+nowSQL(4)+` AS now, pg_catalog.set_config('synchronous_commit', $5, true) AS sync),
			r AS (UPDATE {schema}.records SET attempts = attempts + 1, lease_expires = c.now + $3::bigint * interval '1 microsecond',
				updated = c.now, child_pgid = 0, child_start = 0 FROM c
				WHERE key = $1 AND token = $2 RETURNING key, attempts, owner_host, owner_pid, c.now)
			INSERT INTO {schema}.attempts (key, n, token, host, pid, started)
			SELECT key, attempts, $2, owner_host, owner_pid, now FROM r
			RETURNING n, id`), key, token, micros(lease), p.now(), p.asyncCommit).Scan(&n, &id)
		if errors.Is(err, pgx.ErrNoRows) {
			return ledger.ErrLeaseLost
		}
		return err
	})
	return n, id, err
}

// Finish implements Ledger, in one statement that commits with
// synchronous_commit on (set_config(..., true) lasts to the end of the
// statement's own transaction): once Finish returns nil the outcome is in
// the server's WAL on disk (and on a synchronous standby, if the server
// has one). When the commit's fate is unknown (the connection broke), the
// record is read again: Finish returns nil only if the outcome is there.
func (p *Ledger) Finish(ctx context.Context, req ledger.FinishRequest) error {
	stdout, stderr := req.Output()
	tail := req.Tail()
	err := p.countFenced(ctx, "record outcome", p.q(`WITH c AS (SELECT `+nowSQL(15)+` AS now,
			pg_catalog.set_config('synchronous_commit', $16, true) AS sync),
		r AS (UPDATE {schema}.records SET status = $3, exit_code = $4, exit_source = $5, updated = c.now, finished = c.now,
			duration_ms = $6, ttl_ms = $7::bigint,
			expires = CASE WHEN $7::bigint > 0 THEN c.now + $7::bigint * interval '1 millisecond' END,
			lease_expires = NULL, output_stored = $8, stdout = $9, stderr = $10, stdout_truncated = $11, stderr_truncated = $12,
			class = $13, reason = $17`+ledger.BumpSQL(req.Class, req.Status)+`
			FROM c WHERE key = $1 AND token = $2 RETURNING c.now),
		a AS (UPDATE {schema}.attempts SET ended = r.now, exit_code = $4, class = $13, stderr_tail = $18 FROM r WHERE id = $14 AND attempts.key = $1)
		SELECT count(*) FROM r`),
		req.Key, req.Token, string(req.Status), req.ExitCode, req.ExitSource, req.Duration.Milliseconds(), req.TTL.Milliseconds(),
		req.OutputStored, stdout, stderr, req.StdoutTruncated, req.StderrTruncated, req.Class, req.AttemptID, p.now(), p.syncCommit,
		ledger.ReasonArg(tail), tail)
	var se *ledger.StoreError
	if errors.As(err, &se) {
		// The re-read keeps the call's deadline, not its cancellation.
		rctx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
		if d, ok := ctx.Deadline(); ok {
			rctx, cancel = context.WithDeadline(rctx, d)
		}
		defer cancel()
		if req.Landed(p.getRecord(rctx, p.db, req.Key, false)) {
			return nil
		}
	}
	return err
}

// Release implements Ledger. Restoring the previous state draws a fresh
// token, which fences the releasing owner out: it must not write again.
func (p *Ledger) Release(ctx context.Context, key string, token, attemptID int64, prev *ledger.Snapshot) error {
	if prev == nil {
		// The attempts go with the record (ON DELETE CASCADE).
		return p.execFenced(ctx, "release", p.q(`WITH c AS (SELECT pg_catalog.set_config('synchronous_commit', $3, true))
			DELETE FROM {schema}.records USING c WHERE key = $1 AND token = $2`), key, token, p.asyncCommit)
	}
	var code any
	if prev.HasExit {
		code = prev.ExitCode
	}
	return p.countFenced(ctx, "release", p.q(`WITH c AS (SELECT `+nowSQL(10)+` AS now, pg_catalog.set_config('synchronous_commit', $11, true) AS sync),
		r AS (UPDATE {schema}.records SET status = $4, attempts = $5, max_attempts = $6, exit_code = $7::integer,
			finished = $8::timestamptz, expires = $9::timestamptz, lease_expires = NULL, child_pgid = 0, child_start = 0,
			updated = c.now, token = pg_catalog.nextval('{schema}.tokens') FROM c WHERE key = $1 AND token = $2 RETURNING key),
		a AS (DELETE FROM {schema}.attempts WHERE id = $3 AND key IN (SELECT key FROM r))
		SELECT count(*) FROM r`),
		key, token, attemptID, string(prev.Status), prev.Attempts, prev.MaxAttempts, code,
		tsArg(prev.Finished), tsArg(prev.Expires), p.now(), p.asyncCommit)
}
