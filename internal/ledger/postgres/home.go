package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/ledger"
)

// homeSQL is the identity of the database the ledger is in: the cluster's
// system identifier (random at initdb) and the database's OID. A ledger
// restored from pg_dump into another database, or onto another server,
// finds a home that is not the one it recorded (meta.home), and with it
// a token sequence that may be behind tokens handed out after the dump.
const homeSQL = `(SELECT s.system_identifier::text FROM pg_catalog.pg_control_system() s) || ':' ||
	(SELECT d.oid::text FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())`

// restoredHint is what makes a restored ledger hand out tokens again.
const restoredHint = "after restoring a ledger, have its owner run 'idem schema --apply' once: it moves the fencing tokens past any handed out since the backup"

// checkHome refuses a ledger whose recorded home is not this database:
// its tokens could repeat ones handed out after its backup. A ledger that
// recorded none (made before idem recorded it) is not checked.
func (p *Ledger) checkHome(stored, current string) error {
	if stored == "" || stored == current || p.rehome {
		return nil
	}
	return &ledger.StoreError{Op: "open", Path: p.desc,
		Err:  fmt.Errorf("the ledger in schema %q was made in another database (restored from a backup?): its fencing tokens could repeat ones handed out since", p.schema),
		Hint: restoredHint}
}

// setHome records this database as the ledger's home, in tx (the ledger's
// owner's: it adds the column when missing).
func (p *Ledger) setHome(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, p.q(`ALTER TABLE {schema}.meta ADD COLUMN IF NOT EXISTS home text`)); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, p.q(`UPDATE {schema}.meta SET home = `+homeSQL))
	return err
}

// moveHome makes a ledger restored into this database its home: the
// token sequence jumps to the server's clock in microseconds unless it is
// past it already. Tokens handed out before the backup's restore were
// drawn from a sequence that stayed below that (fewer than one token a
// microsecond since the last jump), so no token repeats. It reports
// whether the ledger had another home.
func (p *Ledger) moveHome(ctx context.Context) (bool, error) {
	moved := false
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if err := pin(ctx, tx); err != nil {
			return err
		}
		var stored, current string
		if err := tx.QueryRow(ctx, p.q(`SELECT coalesce(to_jsonb(m)->>'home', ''), `+homeSQL+` FROM {schema}.meta m FOR UPDATE`)).
			Scan(&stored, &current); err != nil {
			return err
		}
		if stored == current {
			return nil
		}
		if stored != "" {
			moved = true
			if _, err := tx.Exec(ctx, p.q(`SELECT pg_catalog.setval('{schema}.tokens',
				greatest(t.last_value, (extract(epoch FROM pg_catalog.clock_timestamp()) * 1e6)::bigint)) FROM {schema}.tokens t`)); err != nil {
				return err
			}
		}
		return p.setHome(ctx, tx)
	})
	if err != nil {
		return false, p.wrap("move the ledger's tokens", err)
	}
	return moved, nil
}
