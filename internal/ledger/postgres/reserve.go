package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/ledger"
)

// Reserve implements Ledger. The common cases are single statements: a
// replay of a final record (UPDATE ... RETURNING), then the claim of a new
// key (INSERT ... ON CONFLICT DO NOTHING RETURNING token, with its first
// attempt). Everything else — continuing a retryable record, rerunning a
// failed one, an expired TTL, a takeover, busy, a fingerprint mismatch —
// needs the record and, for a same-host owner, the OwnerDead callback: it
// runs in one short transaction that locks the row (SELECT ... FOR NO KEY
// UPDATE) before deciding, so no other reservation, renewal or outcome
// interleaves between the read and the write.
func (p *Ledger) Reserve(ctx context.Context, req ledger.ReserveRequest) (*ledger.Reservation, error) {
	command, err := json.Marshal(req.Command)
	if err != nil {
		return nil, &ledger.StoreError{Op: "reserve", Path: p.desc, Err: err}
	}
	var res *ledger.Reservation
	err = p.do(ctx, "reserve", func() error {
		// A record that vanishes between the claim and the lock (purged)
		// sends us round again; a handful of rounds is plenty.
		for round := 0; round < retries; round++ {
			var err error
			if res, err = p.replayFinal(ctx, req); err != nil || res != nil {
				return err
			}
			if res, err = p.create(ctx, p.db, req, command, p.now()); err != nil || res != nil {
				return err
			}
			if res, err = p.decide(ctx, req, command); err != nil || res != nil {
				return err
			}
		}
		return errors.New("the key kept changing under concurrent runs")
	})
	if err != nil && fateUnknown(err) {
		return p.reserveFate(ctx, req, err)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// fateUnknown reports whether err is the connection breaking under a
// statement, which may have committed all the same.
func fateUnknown(err error) bool {
	var lost *lostError
	return errors.As(err, &lost)
}

// reserveFate settles a reservation whose connection broke under it (a
// server crash, a terminated backend, a reset): a fresh read finds
// whether the claim of a new key committed as this owner's, and then
// returns it, so that the run goes on with what the ledger holds rather
// than leave the key in progress and unowned for a lease. Anything else
// (a takeover, whose previous state a release would need, or no answer)
// is err, whose hint says the key may stay busy.
func (p *Ledger) reserveFate(ctx context.Context, req ledger.ReserveRequest, err error) (*ledger.Reservation, error) {
	// The re-read keeps the call's deadline, not its cancellation.
	rctx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if d, ok := ctx.Deadline(); ok {
		rctx, cancel = context.WithDeadline(rctx, d)
	}
	defer cancel()
	o, _, _ := req.Who()
	res := &ledger.Reservation{Outcome: ledger.Reserved}
	rerr := p.db.QueryRow(rctx, p.q(`SELECT r.token, a.n, a.id FROM {schema}.records r
		JOIN {schema}.attempts a ON a.key = r.key AND a.token = r.token
		WHERE r.key = $1 AND r.status = 'in_progress' AND r.attempts = 1 AND r.created = r.started
			AND r.owner_host = $2 AND r.owner_boot_id = $3 AND r.owner_pidns = $4 AND r.owner_pid = $5 AND r.owner_start = $6`),
		req.Key, o.Host, o.BootID, int64(o.PIDNS), o.PID, int64(o.StartTime)).Scan(&res.Token, &res.Attempt, &res.AttemptID)
	if rerr == nil {
		return res, nil
	}
	var se *ledger.StoreError
	if errors.As(err, &se) {
		c := *se
		c.Hint = "if the reservation reached the server, other hosts find the key busy until its lease (--lease) ends"
		if se.Hint != "" {
			c.Hint = se.Hint + "; " + c.Hint
		}
		return nil, &c
	}
	return nil, err
}

// replayFinal counts and returns a replay of a succeeded (or final failed)
// record with this fingerprint, in one statement; nil when it is not one.
func (p *Ledger) replayFinal(ctx context.Context, req ledger.ReserveRequest) (*ledger.Reservation, error) {
	var stdout, stderr []byte
	rec, err := scanRecord(p.db.QueryRow(ctx, p.q(`WITH c AS (SELECT `+nowSQL(4)+` AS now, pg_catalog.set_config('synchronous_commit', $5, true) AS sync)
		UPDATE {schema}.records SET replays = replays + 1, last_replay = c.now FROM c
		WHERE key = $1 AND fingerprint = $2 AND (status = 'succeeded' OR (status = 'failed' AND NOT $3::boolean))
			AND (expires IS NULL OR expires > c.now)
		RETURNING `+recordColumns+`, `+outputColumns),
		req.Key, req.Fingerprint, req.RerunFailed, p.now(), p.asyncCommit), &hexBytes{&stdout}, &hexBytes{&stderr})
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rec.Stdout, rec.Stderr = stdout, stderr
	return &ledger.Reservation{Outcome: ledger.Replay, Record: rec}, nil
}

// create claims a key that has no record, with its first attempt, in one
// statement; nil when the key has a record.
func (p *Ledger) create(ctx context.Context, q queryRower, req ledger.ReserveRequest, command []byte, now any) (*ledger.Reservation, error) {
	o, cwd, user := req.Who()
	res := &ledger.Reservation{Outcome: ledger.Reserved, Attempt: 1}
	err := q.QueryRow(ctx, p.q(`WITH c AS (SELECT `+nowSQL(11)+` AS now, pg_catalog.set_config('synchronous_commit', $14, true) AS sync), rec AS (
			INSERT INTO {schema}.records (key, fingerprint, command, status, attempts, max_attempts, token,
				owner_host, owner_boot_id, owner_pidns, owner_pid, owner_start, lease_expires, created, started, updated,
				run_cwd, run_user)
			SELECT $1, $2, $3::jsonb, 'in_progress', 1, $4, pg_catalog.nextval('{schema}.tokens'), $5, $6, $7, $8, $9,
				c.now + $10::bigint * interval '1 microsecond', c.now, c.now, c.now, $12, $13 FROM c
			ON CONFLICT (key) DO NOTHING
			RETURNING key, token, started)
		INSERT INTO {schema}.attempts (key, n, token, host, pid, started)
		SELECT key, 1, token, $5, $8, started FROM rec
		RETURNING token, id`),
		req.Key, req.Fingerprint, string(command), req.MaxAttempts,
		o.Host, o.BootID, int64(o.PIDNS), o.PID, int64(o.StartTime), micros(req.Lease), now, cwd, user, p.syncCommit).Scan(&res.Token, &res.AttemptID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// decide executes ledger.Decide under the row's lock. It returns nil, nil
// when the record vanished before it could be locked.
func (p *Ledger) decide(ctx context.Context, req ledger.ReserveRequest, command []byte) (*ledger.Reservation, error) {
	var res *ledger.Reservation
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		res = nil
		// Lock first, then read the clock: a wait for the lock must not
		// make "now" stale.
		b := &pgx.Batch{}
		b.Queue(pinSQL)
		// A token drawn here is handed to a command: the commit waits for
		// the WAL flush (SET LOCAL: it ends with the transaction, and so
		// works through a pooler in transaction mode).
		b.Queue(`SELECT pg_catalog.set_config('synchronous_commit', $1, true)`, p.syncCommit)
		b.Queue(p.q(`SELECT `+recordColumns+` FROM {schema}.records WHERE key = $1 FOR NO KEY UPDATE`), req.Key)
		b.Queue(`SELECT `+epochUS(nowSQL(1)), p.now())
		br := tx.SendBatch(ctx, b)
		_, err := br.Exec()
		var sync string
		if err == nil {
			err = br.QueryRow().Scan(&sync)
		}
		var rec *ledger.Record
		if err == nil {
			rec, err = scanRecord(br.QueryRow())
		}
		var now time.Time
		if err == nil {
			err = br.QueryRow().Scan(&usTime{&now})
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if errors.Is(err, ledger.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		st := &reserveSteps{p: p, tx: tx, req: &req, command: command, rec: rec, now: now}
		res, err = ledger.Execute(ctx, ledger.Decide(rec, req, now), rec, st)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// reserveSteps are decide's ledger.Steps: its writes, in the transaction
// that locked and read the record rec at now.
type reserveSteps struct {
	p       *Ledger
	tx      pgx.Tx
	req     *ledger.ReserveRequest
	command []byte
	rec     *ledger.Record
	now     time.Time
}

var _ ledger.Steps = (*reserveSteps)(nil)

// DeleteExpired implements ledger.Steps, in one statement.
func (st *reserveSteps) DeleteExpired(ctx context.Context) error {
	_, err := st.tx.Exec(ctx, st.p.q(`WITH d AS (DELETE FROM {schema}.records WHERE key = $1 RETURNING `+ledger.CounterColumns+`)
		`+addTotalsSQL(`0`, `1`)), st.req.Key)
	return err
}

// Create implements ledger.Steps: the record is gone, so its key takes no
// conflict.
func (st *reserveSteps) Create(ctx context.Context) (*ledger.Reservation, error) {
	res, err := st.p.create(ctx, st.tx, *st.req, st.command, st.now)
	if err == nil && res == nil {
		err = errors.New("re-creating an expired record found a conflict")
	}
	return res, err
}

// EndAbandoned implements ledger.Steps.
func (st *reserveSteps) EndAbandoned(ctx context.Context) error {
	_, err := st.tx.Exec(ctx, st.p.q(`UPDATE {schema}.attempts SET ended = $2, exit_code = $3, class = $4
		WHERE key = $1 AND ended IS NULL`), st.req.Key, st.now, ledger.AbandonedExitCode, ledger.ClassAbandoned)
	return err
}

// Close implements ledger.Steps.
func (st *reserveSteps) Close(ctx context.Context) error {
	_, err := st.tx.Exec(ctx, st.p.q(`UPDATE {schema}.records SET status = 'failed', max_attempts = $2, updated = $3 WHERE key = $1`),
		st.req.Key, st.req.MaxAttempts, st.now)
	return err
}

// Abandon implements ledger.Steps.
func (st *reserveSteps) Abandon(ctx context.Context) error {
	_, err := st.tx.Exec(ctx, st.p.q(`UPDATE {schema}.records SET status = 'failed', exit_code = $2, exit_source = 'idem',
		token = pg_catalog.nextval('{schema}.tokens'), max_attempts = $3, finished = $4::timestamptz, updated = $4::timestamptz, duration_ms = $5,
		lease_expires = NULL, expires = CASE WHEN ttl_ms > 0 THEN $4::timestamptz + ttl_ms * interval '1 millisecond' END,
		class = 'abandoned', reason = NULL, att_abandoned = att_abandoned + 1, runs_failed = runs_failed + 1
		WHERE key = $1`),
		st.req.Key, ledger.AbandonedExitCode, st.req.MaxAttempts, st.now, st.now.Sub(st.rec.Started).Milliseconds())
	return err
}

// Take implements ledger.Steps: the record's previous attempts number
// done.
func (st *reserveSteps) Take(ctx context.Context, done int, prev *ledger.Snapshot, abandoned bool) (*ledger.Reservation, error) {
	req, now := st.req, st.now
	o, cwd, user := req.Who()
	res := &ledger.Reservation{Outcome: ledger.Reserved, Prev: prev}
	err := st.tx.QueryRow(ctx, st.p.q(`WITH rec AS (
			UPDATE {schema}.records SET status = 'in_progress', attempts = $2, max_attempts = $3, token = pg_catalog.nextval('{schema}.tokens'),
				owner_host = $4, owner_boot_id = $5, owner_pidns = $6, owner_pid = $7, owner_start = $8,
				child_pgid = 0, child_start = 0, lease_expires = $9::timestamptz + $10::bigint * interval '1 microsecond',
				started = $9, updated = $9, finished = NULL, expires = NULL,
				run_cwd = $11, run_user = $12, att_abandoned = att_abandoned + $13::int
			WHERE key = $1 RETURNING key, token, attempts)
		INSERT INTO {schema}.attempts (key, n, token, host, pid, started)
		SELECT key, attempts, token, $4, $7, $9 FROM rec
		RETURNING token, n, id`),
		req.Key, done+1, req.MaxAttempts, o.Host, o.BootID, int64(o.PIDNS), o.PID, int64(o.StartTime), now, micros(req.Lease),
		cwd, user, boolInt(abandoned)).
		Scan(&res.Token, &res.Attempt, &res.AttemptID)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Replay implements ledger.Steps: it counts one suppressed duplicate of
// the locked record and returns it with its output, as the UPDATE leaves
// it, whether or not a step changed it before.
func (st *reserveSteps) Replay(ctx context.Context, _ bool) (*ledger.Reservation, error) {
	var stdout, stderr []byte
	rec, err := scanRecord(st.tx.QueryRow(ctx, st.p.q(`UPDATE {schema}.records SET replays = replays + 1, last_replay = $2 WHERE key = $1
		RETURNING `+recordColumns+`, `+outputColumns), st.req.Key, st.now), &hexBytes{&stdout}, &hexBytes{&stderr})
	if err != nil {
		return nil, err
	}
	rec.Stdout, rec.Stderr = stdout, stderr
	return &ledger.Reservation{Outcome: ledger.Replay, Record: rec}, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
