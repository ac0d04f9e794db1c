package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// Reserve implements Ledger: it reads the record and executes what
// ledger.Decide says, in one BEGIN IMMEDIATE transaction.
func (s *Ledger) Reserve(ctx context.Context, req ledger.ReserveRequest) (*ledger.Reservation, error) {
	if s.replayOnly != nil {
		// The connection holds the ledger's lock until it closes (see
		// open), so it closes before the replay's output is written, which
		// a slow reader could make last, and others wait for nothing.
		defer s.Close()
	}
	var res *ledger.Reservation
	st := &reserveSteps{s: s, req: req}
	err := s.writeTokens(ctx, "reserve", func(ctx context.Context, tx querier) error {
		res, st.replay, st.counted = nil, nil, false
		st.tx, st.now = tx, s.Now()
		rec, err := getRecord(ctx, tx, st.req.Key, false)
		if err != nil && !errors.Is(err, ledger.ErrNotFound) {
			return err
		}
		st.rec = rec
		res, err = ledger.Execute(ctx, ledger.Decide(rec, st.req, st.now), rec, st)
		switch {
		case err != nil:
			return err
		case s.replayOnly != nil && st.replay == nil:
			return errNotReplay
		case res.Outcome == ledger.Busy:
			return errNothingWritten // a busy key writes nothing: not even the stamp
		case st.replay != nil:
			if bumpReplays(ctx, tx, rec.Key, st.now) != nil {
				return errNothingWritten // the replay, uncounted
			}
			st.counted = true
		}
		return nil
	})
	switch {
	case err != nil && st.replay != nil:
		// A replay that changed nothing else: only its counter failed to
		// land (a full disk, an I/O error at the commit). It loses one
		// count, never the replay: the output is the recorded one, byte
		// for byte, with no notice added, and the next write that matters
		// (a run's reservation or outcome) reports the fault.
		res = st.replay
	case errors.Is(err, errNotReplay):
		return nil, s.replayOnly
	case err != nil:
		return nil, err
	case st.counted:
		st.rec.Replays++
		st.rec.LastReplay = time.UnixMilli(st.now.UnixMilli())
	}
	if res.Outcome == ledger.Replay {
		// Counted or not: on a full disk, the trim is what gives the
		// -wal's space back.
		s.trimWAL(ctx)
	}
	return res, nil
}

// errNotReplay is what Reserve's transaction returns, to be rolled back,
// when a connection that serves replays only (see Ledger.replayOnly) was
// asked for anything else: a fresh run, a takeover, a wait for a busy key.
var errNotReplay = errors.New("not a replay")

// reserveSteps are Reserve's ledger.Steps: its writes, in the transaction
// that read the record rec (nil when there is none) at now.
type reserveSteps struct {
	s   *Ledger
	tx  querier
	req ledger.ReserveRequest
	rec *ledger.Record
	now time.Time
	// replay is the replay of a record that changed nothing, once read,
	// whose counter Reserve writes last in the transaction; Reserve
	// returns it uncounted when the transaction fails after that.
	// counted says the counter was written.
	replay  *ledger.Reservation
	counted bool
}

var _ ledger.Steps = (*reserveSteps)(nil)

// DeleteExpired implements ledger.Steps.
func (st *reserveSteps) DeleteExpired(ctx context.Context) error {
	if err := addTotals(ctx, st.tx, st.rec.Counters, 0, 1); err != nil {
		return err
	}
	return deleteKey(ctx, st.tx, st.req.Key)
}

// EndAbandoned implements ledger.Steps.
func (st *reserveSteps) EndAbandoned(ctx context.Context) error {
	_, err := st.tx.ExecContext(ctx, `UPDATE attempts SET ended_ms = ?, exit_code = ?, class = ?
		WHERE key = ? AND ended_ms IS NULL`, st.now.UnixMilli(), ledger.AbandonedExitCode, ledger.ClassAbandoned, st.req.Key)
	return err
}

// Close implements ledger.Steps.
func (st *reserveSteps) Close(ctx context.Context) error {
	_, err := st.tx.ExecContext(ctx, `UPDATE records SET status = 'failed', max_attempts = ?, updated_ms = ? WHERE key = ?`,
		st.req.MaxAttempts, st.now.UnixMilli(), st.req.Key)
	return err
}

// who is the request's owner, directory and user (see
// ledger.ReserveRequest.Who): asked for only by the steps that draw a
// token, which is drawn under the owner's boot (see nextToken).
func (st *reserveSteps) who() (o ledger.Owner, cwd, user string) {
	o, cwd, user = st.req.Who()
	st.s.setBoot(o.BootID)
	return o, cwd, user
}

// Abandon implements ledger.Steps.
func (st *reserveSteps) Abandon(ctx context.Context) error {
	st.who()
	token, err := st.s.nextToken(ctx, st.tx)
	if err != nil {
		return err
	}
	req, now := &st.req, st.now
	_, err = st.tx.ExecContext(ctx, `UPDATE records SET status = 'failed', exit_code = ?, exit_source = 'idem',
		token = ?, max_attempts = ?, finished_ms = ?, updated_ms = ?, duration_ms = ?,
		expires_ms = CASE WHEN ttl_ms > 0 THEN ? + ttl_ms END, class = 'abandoned', reason = NULL,
		att_abandoned = att_abandoned + 1, runs_failed = runs_failed + 1 WHERE key = ?`,
		ledger.AbandonedExitCode, token, req.MaxAttempts, now.UnixMilli(), now.UnixMilli(),
		now.Sub(st.rec.Started).Milliseconds(), now.UnixMilli(), req.Key)
	return err
}

func deleteKey(ctx context.Context, tx querier, key string) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM attempts WHERE key = ?`, key); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM outputs WHERE key = ?`, key); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM records WHERE key = ?`, key)
	return err
}

// Create implements ledger.Steps.
func (st *reserveSteps) Create(ctx context.Context) (*ledger.Reservation, error) {
	tx, req, now := st.tx, &st.req, st.now
	o, cwd, user := st.who()
	token, err := st.s.nextToken(ctx, tx)
	if err != nil {
		return nil, err
	}
	if err := readOutputPath(ctx, tx, req.Key); err != nil {
		return nil, err
	}
	command, err := json.Marshal(req.Command)
	if err != nil {
		return nil, err
	}
	nowMS := now.UnixMilli()
	if _, err := tx.ExecContext(ctx, `INSERT INTO records (key, fingerprint, command, status, attempts, max_attempts, token,
		owner_host, owner_boot_id, owner_pidns, owner_pid, owner_start, lease_expires_ms, created_ms, started_ms, updated_ms,
		run_cwd, run_user)
		VALUES (?, ?, ?, 'in_progress', 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		req.Key, req.Fingerprint, string(command), req.MaxAttempts, token,
		o.Host, o.BootID, int64(o.PIDNS), o.PID, int64(o.StartTime), now.Add(req.Lease).UnixMilli(), nowMS, nowMS, nowMS,
		cwd, user); err != nil {
		return nil, err
	}
	id, err := insertAttempt(ctx, tx, req.Key, 1, token, o, now)
	if err != nil {
		return nil, err
	}
	return &ledger.Reservation{Outcome: ledger.Reserved, Token: token, Attempt: 1, AttemptID: id}, nil
}

// Take implements ledger.Steps: the record's previous attempts number
// done.
func (st *reserveSteps) Take(ctx context.Context, done int, prev *ledger.Snapshot, abandoned bool) (*ledger.Reservation, error) {
	tx, req, now := st.tx, &st.req, st.now
	o, cwd, user := st.who()
	token, err := st.s.nextToken(ctx, tx)
	if err != nil {
		return nil, err
	}
	if err := readOutputPath(ctx, tx, req.Key); err != nil {
		return nil, err
	}
	n := done + 1
	nowMS := now.UnixMilli()
	if _, err := tx.ExecContext(ctx, `UPDATE records SET status = 'in_progress', attempts = ?, max_attempts = ?, token = ?,
		owner_host = ?, owner_boot_id = ?, owner_pidns = ?, owner_pid = ?, owner_start = ?, child_pgid = 0, child_start = 0,
		lease_expires_ms = ?, started_ms = ?, updated_ms = ?, finished_ms = NULL, expires_ms = NULL,
		run_cwd = ?, run_user = ?, att_abandoned = att_abandoned + ? WHERE key = ?`,
		n, req.MaxAttempts, token, o.Host, o.BootID, int64(o.PIDNS), o.PID, int64(o.StartTime),
		now.Add(req.Lease).UnixMilli(), nowMS, nowMS, cwd, user, abandoned, req.Key); err != nil {
		return nil, err
	}
	id, err := insertAttempt(ctx, tx, req.Key, n, token, o, now)
	if err != nil {
		return nil, err
	}
	return &ledger.Reservation{Outcome: ledger.Reserved, Token: token, Attempt: n, AttemptID: id, Prev: prev}, nil
}

// readOutputPath reads the pages of the outputs table that the outcome
// writes for key, before the command runs: the page check reads each
// b-tree's rightmost path, where rows in rowid and time order go, but an
// output goes into the key's index at the key's own place (and replaces
// a row of its own there). A damaged page there then refuses the run,
// where it would fail the outcome after the command ran, and leave the
// key to run again at every run after. length() reads an earlier
// output's row but not its content: a re-run of a key with a large
// output does not read it all again (16 MB: 7 page reads, not 3,900).
func readOutputPath(ctx context.Context, tx querier, key string) error {
	var n int64
	return tx.QueryRowContext(ctx, `SELECT count(length(stdout)) FROM outputs WHERE key = ?`, key).Scan(&n)
}

func insertAttempt(ctx context.Context, tx querier, key string, n int, token int64, o ledger.Owner, now time.Time) (int64, error) {
	var id int64
	err := tx.QueryRowContext(ctx, `INSERT INTO attempts (key, n, token, host, pid, started_ms) VALUES (?, ?, ?, ?, ?, ?) RETURNING id`,
		key, n, token, o.Host, o.PID, now.UnixMilli()).Scan(&id)
	return id, err
}

// Replay implements ledger.Steps: the record as read, with its output.
// A replay that changed nothing is counted last in the transaction, by
// Reserve, which replays it even when that count cannot land; one that a
// step made final in this transaction is read again and counted with the
// step's writes, which must land for it.
func (st *reserveSteps) Replay(ctx context.Context, changed bool) (*ledger.Reservation, error) {
	rec := st.rec
	if !changed {
		if err := readOutput(ctx, st.tx, rec); err != nil {
			return nil, err
		}
		st.replay = &ledger.Reservation{Outcome: ledger.Replay, Record: rec}
		return st.replay, nil
	}
	rec, err := getRecord(ctx, st.tx, st.req.Key, true)
	if err != nil {
		return nil, err
	}
	if err := bumpReplays(ctx, st.tx, rec.Key, st.now); err != nil {
		return nil, err
	}
	rec.Replays++
	rec.LastReplay = time.UnixMilli(st.now.UnixMilli())
	return &ledger.Reservation{Outcome: ledger.Replay, Record: rec}, nil
}

// bumpReplays counts one suppressed duplicate of key at now: the records
// row it updates holds no output (see schema_v4.sql), so this writes one
// page, whatever the output's size.
func bumpReplays(ctx context.Context, tx querier, key string, now time.Time) error {
	_, err := tx.ExecContext(ctx, `UPDATE records SET replays = replays + 1, last_replay_ms = ? WHERE key = ?`, now.UnixMilli(), key)
	return err
}
