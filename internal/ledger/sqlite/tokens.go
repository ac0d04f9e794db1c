package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/idemhq/idem/internal/ledger"
)

// tokenBlock is how many tokens one raise of the durable mark covers: a
// run pays the mark's FULL commit once per tokenBlock reservations, and
// once per boot.
const tokenBlock = 1024

// errRaiseMark is nextToken's answer when the next token is not covered by
// a durable mark written during this boot: the caller rolls back and runs
// its transaction again behind raiseMark (see writeTokens).
var errRaiseMark = errors.New("the token mark must be raised first")

// nextToken draws the next fencing token, only below the durable mark
// written during this boot (see migrate_token_mark.sql): the token may
// then be lost with its NORMAL commit in a power cut, but never handed
// out again.
//
// It is one statement, which updates no row when the mark does not cover
// the next token, and which also reads the run guard, which a run that
// draws a token asks for next (see RunGuard): a reservation's statements
// are each parsed once in a process that makes one run, so a statement
// fewer is a parse fewer.
func (s *Ledger) nextToken(ctx context.Context, tx querier) (int64, error) {
	var token int64
	var secret []byte
	var dev, ino sql.NullInt64
	err := tx.QueryRowContext(ctx, `UPDATE counters SET value = value + 1
		WHERE name = 'token' AND value < (SELECT mark FROM token_mark WHERE boot_id = ?)
		RETURNING value, (SELECT secret FROM run_guard WHERE singleton = 1),
			(SELECT lock_dev FROM run_guard WHERE singleton = 1), (SELECT lock_ino FROM run_guard WHERE singleton = 1)`, s.bootID).
		Scan(&token, &secret, &dev, &ino)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, errRaiseMark
	}
	if err != nil {
		return 0, err
	}
	s.guard = nil
	if secret != nil && dev.Valid && ino.Valid {
		s.guard = &ledger.RunGuard{Secret: secret, LockDev: uint64(dev.Int64), LockIno: uint64(ino.Int64)}
	}
	return token, nil
}

// restoredBoot is the token mark's boot in a backup (see Backup): a
// ledger restored from one raises the mark before its first token, and
// that raise jumps the counter to the clock (see raiseMark).
const restoredBoot = "restored from a backup"

// raiseMark makes the next tokenBlock tokens durable before any of them is
// handed out: in tx, which commits with synchronous=FULL, the mark goes
// tokenBlock past the counter. When the mark was written during
// another boot, reservations after it may have been lost in a power cut
// with their counter updates, so the counter first jumps to the mark.
//
// A restored backup has lost every token handed out after it was made,
// and nothing in the file can say how many: the high-water mark is kept
// outside it, in the clock. The counter jumps to the time in microseconds
// since 1970, which is past every token the ledger handed out as long as
// it never handed out more than one per microsecond on average (each is a
// committed transaction) and the clock was not set back past the backup's
// time. Microseconds keep tokens below 2^53, exact in JSON.
func (s *Ledger) raiseMark(ctx context.Context, tx querier) error {
	var value, mark int64
	var boot string
	if err := tx.QueryRowContext(ctx, `SELECT c.value, m.mark, m.boot_id FROM counters c, token_mark m WHERE c.name = 'token'`).
		Scan(&value, &mark, &boot); err != nil {
		return err
	}
	if boot == s.bootID && value < mark {
		return nil // another process raised it
	}
	if boot != s.bootID {
		value = max(value, mark)
	}
	if boot == restoredBoot {
		value = max(value, s.Now().UnixMicro())
	}
	if _, err := tx.ExecContext(ctx, `UPDATE counters SET value = ? WHERE name = 'token'`, value); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `UPDATE token_mark SET mark = ?, boot_id = ?`, value+tokenBlock, s.bootID)
	return err
}

// setBoot records the boot id reservations are made in; empty: unknown.
func (s *Ledger) setBoot(boot string) {
	if boot != "" {
		s.bootID = boot
	}
}

// writeTokens is write for a transaction that may draw tokens: when the
// durable mark does not cover the next one, fn runs again behind a raise
// of the mark in one transaction committed with synchronous=FULL. One
// transaction, not a raise and then a retry: processes that do not know
// the boot each name their own (see Open), so between a separate raise
// and its retry another one's raise would take the mark away again.
func (s *Ledger) writeTokens(ctx context.Context, op string, fn func(context.Context, querier) error) error {
	err := s.write(ctx, op, fn)
	if errors.Is(err, errRaiseMark) {
		err = s.writeSync(ctx, op, true, func(ctx context.Context, tx querier) error {
			if err := s.raiseMark(ctx, tx); err != nil {
				return err
			}
			return fn(ctx, tx)
		})
	}
	return err
}
