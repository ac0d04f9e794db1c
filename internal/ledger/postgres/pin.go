package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pinSQL pins search_path to pg_catalog for the rest of its transaction.
// A role's or database's search_path (ALTER ROLE ... SET search_path =
// evil, pg_catalog) would otherwise resolve every unqualified function,
// operator and type idem's SQL names — now(), nextval(), =, jsonb — to
// whatever that schema defines, and so hand out its tokens and its
// clock. A session SET does not survive a pooler in transaction mode and
// a start-up parameter is refused by one; a setting local to the
// transaction works through both. The functions idem relies on most are
// also written pg_catalog.name, which holds even in a statement that
// runs unpinned.
const pinSQL = `SELECT pg_catalog.set_config('search_path', 'pg_catalog', true)`

// pinned runs each statement in one round trip after pinSQL, in the
// implicit transaction that lasts until the batch's Sync, so the pin
// holds for the statement's parse and ends with it. Name resolution
// happens when a statement is parsed, so the pin cannot be part of the
// statement itself.
type pinned struct{ pool *pgxpool.Pool }

func (d pinned) send(ctx context.Context, sql string, args []any) pgx.BatchResults {
	b := &pgx.Batch{}
	b.Queue(pinSQL)
	b.Queue(sql, args...)
	return d.pool.SendBatch(ctx, b)
}

// QueryRow is pgxpool.Pool's, pinned.
func (d pinned) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return pinnedRow{d.send(ctx, sql, args)}
}

// Query is pgxpool.Pool's, pinned.
func (d pinned) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br := d.send(ctx, sql, args)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &pinnedRows{Rows: rows, br: br}, nil
}

// Exec is pgxpool.Pool's, pinned.
func (d pinned) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	br := d.send(ctx, sql, args)
	_, err := br.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

type pinnedRow struct{ br pgx.BatchResults }

func (r pinnedRow) Scan(dest ...any) error {
	_, err := r.br.Exec()
	if err == nil {
		err = r.br.QueryRow().Scan(dest...)
	}
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

// pinnedRows closes its batch with its rows, which gives the connection
// back to the pool.
type pinnedRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error
}

func (r *pinnedRows) Close() {
	if r.br == nil {
		return
	}
	r.Rows.Close()
	r.err = r.br.Close()
	r.br = nil
}

func (r *pinnedRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// pin pins search_path in an explicit transaction, as its first
// statement.
func pin(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, pinSQL)
	return err
}
