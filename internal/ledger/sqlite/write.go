package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// trimWAL checkpoints the WAL into the database and truncates it to zero
// once it has grown past walTruncateAt; SetChild (while the command runs),
// Finish and a replay, which end a run, call it. It is needed because runs
// exit without closing the ledger (CloseAtExit): the next process to open
// it alone recovers the WAL from the file and counts none of its frames as
// checkpointed, so the WAL would never restart, every open would read all
// of it, and SQLite's own wal_autocheckpoint would copy all of it again at
// every commit past its threshold. Only a truncated WAL leaves the next
// opener nothing to read. It is opportunistic: with busy_timeout 0 it gives
// up at once when another process is reading or writing (which then shares
// the WAL index, so SQLite's checkpoints work), and its errors are ignored:
// every transaction is already committed, and the next run tries again.
func (s *Ledger) trimWAL(ctx context.Context) {
	fi, err := os.Stat(s.path + "-wal") // a stat opens no descriptor: the locks are safe
	if err != nil || fi.Size() < walTruncateAt {
		return
	}
	if s.shmReplaced() {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if _, err := s.conn.ExecContext(ctx, `PRAGMA busy_timeout = 0`); err != nil {
		return
	}
	s.conn.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
	s.conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, busyTimeout))
}

// write runs fn in one BEGIN IMMEDIATE transaction, retrying a bounded number
// of times when SQLite reports BUSY beyond its own timeout.
func (s *Ledger) write(ctx context.Context, op string, fn func(context.Context, querier) error) error {
	return s.writeSync(ctx, op, false, fn)
}

// writeSync is write that commits with synchronous=FULL when full (the WAL
// is fsynced at the commit), else NORMAL. The level is set only when it
// changes, so that a run's last write, its outcome, leaves it at FULL
// rather than paying one more statement before exit to set NORMAL again.
func (s *Ledger) writeSync(ctx context.Context, op string, full bool, fn func(context.Context, querier) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.full != full {
		level := "NORMAL"
		if full {
			level = "FULL"
		}
		// A setting of the connection's, which waits for no lock.
		if _, err := s.conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA synchronous = `+level); err != nil {
			return storeErr(op, s.path, err)
		}
		s.full = full
	}
	var err error
	reread := false
	for try := 0; try < busyRetries; try++ {
		var committing bool
		err, committing = s.writeOnce(ctx, fn)
		if !committing && !reread && isReadFault(err) && ctx.Err() == nil {
			// A read that failed (one transient EIO reads as a damaged
			// page) before anything was committed: the transaction rolled
			// back, so it is run once more before the ledger is called
			// corrupt.
			reread = true
			continue
		}
		if !isBusy(err) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		s.guard = nil // read in a transaction that did not commit
	}
	if err == nil && full {
		return s.syncNewEntries(op)
	}
	return s.wrap(op, err)
}

// writeOnce runs fn in one transaction; committing says whether err came
// from the commit (whose outcome is then unknown). The transaction is
// stamped with the ledger's identity (see walid.go).
//
// Only its BEGIN IMMEDIATE, which waits for the write lock, watches ctx:
// a deadline or a cancellation ends that wait (SQLite's busy handler
// sees it). The statements after it, and the COMMIT, hold the lock and
// wait for nobody (a writer's open puts the ledger in WAL mode, where a
// COMMIT waits for no reader: see checkSchema), so fn gets ctx without
// its end: an interruption halfway would only throw away a transaction
// about to land, and the fencing in each statement, not the caller's
// deadline, keeps a late one safe. Watching ctx costs a goroutine a
// statement (the driver's), and one a query in a *sql.Tx begun with ctx
// (database/sql's): 16 of the 33 goroutines a run started. That is why
// the transaction is the connection's own BEGIN and COMMIT, not a
// *sql.Tx.
func (s *Ledger) writeOnce(ctx context.Context, fn func(context.Context, querier) error) (err error, committing bool) {
	if _, err := s.conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		// A BEGIN that took effect just as ctx ended reports ctx's error.
		s.rollback()
		return err, false
	}
	if s.shmChanged() {
		s.rollback()
		return errShmReplaced, false
	}
	sctx := context.WithoutCancel(ctx)
	err = fn(sctx, s.conn)
	if err == nil && s.stamp != "" {
		_, err = s.conn.ExecContext(sctx, s.stamp)
	}
	if err != nil {
		s.rollback()
		if errors.Is(err, errNothingWritten) {
			return nil, false // rolled back: there is nothing to commit
		}
		return err, false
	}
	if _, err := s.conn.ExecContext(sctx, `COMMIT`); err != nil {
		s.rollback() // a COMMIT that failed may leave the transaction open
		return err, true
	}
	return nil, true
}

// rollback ends the connection's transaction, if one is open (else
// SQLite's "no transaction is active" is the only error, and moot).
func (s *Ledger) rollback() {
	s.conn.ExecContext(context.Background(), `ROLLBACK`)
}

// errNothingWritten is what a write transaction's function returns when
// it read and wrote nothing: the transaction is rolled back rather than
// committed, so that it writes nothing to the -wal either (the stamp
// would), and a full disk does not fail a replay.
var errNothingWritten = errors.New("nothing written")

// setID records the ledger's identity, which every write transaction
// stamps on page 1 (PRAGMA application_id): then each transaction in the
// -wal carries it, and a -wal is never replayed onto another ledger's
// file (checkJournal). Setting it to the value it has still writes page
// 1, which is the point.
func (s *Ledger) setID(id uint32) {
	s.id = id
	s.stamp = fmt.Sprintf(`PRAGMA application_id = %d`, int32(id))
}

// fenced runs an owner's UPDATE and turns "no row" into ErrLeaseLost.
func fenced(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ledger.ErrLeaseLost
	}
	return nil
}

// SetChild implements Ledger. The command is running by then, so this is
// where a run trims a WAL that has grown long: the checkpoint overlaps the
// command instead of delaying idem's exit after the outcome.
func (s *Ledger) SetChild(ctx context.Context, key string, token int64, pgid int, start uint64) error {
	err := s.write(ctx, "record child", func(ctx context.Context, tx querier) error {
		return fenced(tx.ExecContext(ctx, `UPDATE records SET child_pgid = ?, child_start = ? WHERE key = ? AND token = ?`,
			pgid, int64(start), key, token))
	})
	if err == nil {
		s.trimWAL(ctx)
	}
	return err
}

// Renew implements Ledger.
func (s *Ledger) Renew(ctx context.Context, key string, token int64, lease time.Duration) error {
	return s.write(ctx, "renew lease", func(ctx context.Context, tx querier) error {
		now := s.Now()
		return fenced(tx.ExecContext(ctx, `UPDATE records SET lease_expires_ms = ?, updated_ms = ? WHERE key = ? AND token = ?`,
			now.Add(lease).UnixMilli(), now.UnixMilli(), key, token))
	})
}

// EndAttempt implements Ledger.
func (s *Ledger) EndAttempt(ctx context.Context, e ledger.AttemptEnd) error {
	return s.write(ctx, "record attempt", func(ctx context.Context, tx querier) error {
		now := s.Now().UnixMilli()
		if err := fenced(tx.ExecContext(ctx, `UPDATE records SET exit_code = ?, exit_source = 'child', updated_ms = ?,
			class = ?, reason = ?`+ledger.BumpSQL(e.Class, "")+` WHERE key = ? AND token = ?`,
			e.ExitCode, now, e.Class, ledger.ReasonArg(e.StderrTail), e.Key, e.Token)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE attempts SET ended_ms = ?, exit_code = ?, class = ?, delay_ms = ?, stderr_tail = ? WHERE id = ?`,
			now, e.ExitCode, e.Class, e.Delay.Milliseconds(), ledger.Tail(e.StderrTail), e.AttemptID)
		return err
	})
}

// StartAttempt implements Ledger.
func (s *Ledger) StartAttempt(ctx context.Context, key string, token int64, lease time.Duration) (int, int64, error) {
	var n int
	var id int64
	err := s.write(ctx, "start attempt", func(ctx context.Context, tx querier) error {
		now := s.Now()
		var o ledger.Owner
		err := tx.QueryRowContext(ctx, `UPDATE records SET attempts = attempts + 1, lease_expires_ms = ?, updated_ms = ?,
			child_pgid = 0, child_start = 0 WHERE key = ? AND token = ? RETURNING attempts, owner_host, owner_pid`,
			now.Add(lease).UnixMilli(), now.UnixMilli(), key, token).Scan(&n, &o.Host, &o.PID)
		if errors.Is(err, sql.ErrNoRows) {
			return ledger.ErrLeaseLost
		}
		if err != nil {
			return err
		}
		id, err = insertAttempt(ctx, tx, key, n, token, o, now)
		return err
	})
	return n, id, err
}

// Finish implements Ledger. It commits with synchronous=FULL: once it
// returns nil the outcome survives a power cut. When the commit itself fails
// the state is unknown, so the record is read again: Finish returns nil only
// if the outcome is there.
func (s *Ledger) Finish(ctx context.Context, req ledger.FinishRequest) error {
	stdout, stderr := req.Output()
	err := s.writeSync(ctx, "record outcome", true, func(ctx context.Context, tx querier) error {
		now := s.Now().UnixMilli()
		var expires sql.NullInt64
		if req.TTL > 0 {
			expires = sql.NullInt64{Int64: now + req.TTL.Milliseconds(), Valid: true}
		}
		tail := req.Tail()
		if err := fenced(tx.ExecContext(ctx, `UPDATE records SET status = ?, exit_code = ?, exit_source = ?, updated_ms = ?,
			finished_ms = ?, duration_ms = ?, ttl_ms = ?, expires_ms = ?, lease_expires_ms = 0, output_stored = ?,
			stdout_truncated = ?, stderr_truncated = ?, class = ?, reason = ?`+ledger.BumpSQL(req.Class, req.Status)+`
			WHERE key = ? AND token = ?`,
			req.Status, req.ExitCode, req.ExitSource, now, now, req.Duration.Milliseconds(), req.TTL.Milliseconds(), expires,
			req.OutputStored, req.StdoutTruncated, req.StderrTruncated, req.Class, ledger.ReasonArg(tail),
			req.Key, req.Token)); err != nil {
			return err
		}
		if err := putOutput(ctx, tx, req.Key, stdout, stderr); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE attempts SET ended_ms = ?, exit_code = ?, class = ?, stderr_tail = ? WHERE id = ?`,
			now, req.ExitCode, req.Class, tail, req.AttemptID)
		return err
	})
	if err == nil {
		if err := s.checkFiles("record outcome"); err != nil {
			return err
		}
		s.trimWAL(ctx)
		return nil
	}
	var se *ledger.StoreError
	if errors.As(err, &se) && req.Landed(getRecord(context.WithoutCancel(ctx), s.conn, req.Key, false)) {
		return nil
	}
	return err
}

// putOutput stores a record's output in its outputs row, apart from the
// records row that leases and replays update (see schema_v4.sql): a row
// only for output that is not empty; an earlier outcome's row goes.
func putOutput(ctx context.Context, tx querier, key string, stdout, stderr []byte) error {
	if len(stdout) == 0 && len(stderr) == 0 {
		_, err := tx.ExecContext(ctx, `DELETE FROM outputs WHERE key = ?`, key)
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO outputs (key, stdout, stderr) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET stdout = excluded.stdout, stderr = excluded.stderr`, key, ledger.NonNil(stdout), ledger.NonNil(stderr))
	return err
}

// Release implements Ledger.
func (s *Ledger) Release(ctx context.Context, key string, token, attemptID int64, prev *ledger.Snapshot) error {
	return s.writeTokens(ctx, "release", func(ctx context.Context, tx querier) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM attempts WHERE id = ?`, attemptID); err != nil {
			return err
		}
		if prev == nil {
			return fenced(tx.ExecContext(ctx, `DELETE FROM records WHERE key = ? AND token = ?`, key, token))
		}
		// A fresh token fences the releasing owner out: it must not write again.
		fresh, err := s.nextToken(ctx, tx)
		if err != nil {
			return err
		}
		return fenced(tx.ExecContext(ctx, `UPDATE records SET status = ?, attempts = ?, max_attempts = ?, exit_code = ?,
			finished_ms = ?, expires_ms = ?, lease_expires_ms = 0, child_pgid = 0, child_start = 0, updated_ms = ?, token = ?
			WHERE key = ? AND token = ?`,
			prev.Status, prev.Attempts, prev.MaxAttempts, nullCode(prev.ExitCode, prev.HasExit),
			ms(prev.Finished), ms(prev.Expires), s.Now().UnixMilli(), fresh, key, token))
	})
}
