package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/ledger"
)

// A ledger records its home: where it was made (meta.home) and the token
// sequence it was made with (meta.home_tokens). A pg_dump of the schema,
// restored anywhere, brings back a token sequence that may be behind
// tokens handed out after the dump; what it cannot bring back is where it
// was made, so a ledger whose recorded home is not where it is now was
// restored, and is refused until its owner moves its tokens (moveHome).
//
// The two are kept apart, in two columns, because an older idem compares
// meta.home whole: a fleet that upgrades one host at a time keeps working
// while some hosts know only the first.

// homeSQL is where the ledger is: the cluster's system identifier (random
// at initdb) and the database's OID. A ledger restored into another
// database, or onto another server, finds another.
const homeSQL = `(SELECT s.system_identifier::text FROM pg_catalog.pg_control_system() s) || ':' ||
	(SELECT d.oid::text FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())`

// homeTokensSQL is the OID of the ledger's token sequence. A restore into
// the same database (the schema dropped first, or pg_restore --clean)
// keeps the system identifier and the database, but re-creates the
// sequence, which gets a new OID. (A restore that re-creates nothing, such
// as a point-in-time recovery of the whole cluster, is not detected: the
// operators' documentation says so.)
const homeTokensSQL = `coalesce(pg_catalog.to_regclass('{schema}.tokens')::pg_catalog.oid::text, '')`

// homeColumnsSQL reads the recorded home from table meta m, whose columns
// exist only once a home was recorded.
const homeColumnsSQL = `coalesce(to_jsonb(m)->>'home', ''), coalesce(to_jsonb(m)->>'home_tokens', '')`

// home is a ledger's home as recorded or as found: "" where none was
// recorded (a ledger made before idem recorded it, or the part of it).
type home struct {
	place, tokens string
}

// restoredFrom reports whether a ledger that recorded home stored and
// finds itself at h was restored from a backup. What was not recorded is
// not compared: such a ledger is not refused for that alone.
func (h home) restoredFrom(stored home) bool {
	return stored.place != "" && stored.place != h.place ||
		stored.tokens != "" && stored.tokens != h.tokens
}

// restoredHint is what makes a restored ledger hand out tokens again.
const restoredHint = "after restoring a ledger, have its owner run 'idem schema --apply' once: it moves the fencing tokens past any handed out since the backup"

// checkHome refuses a ledger whose recorded home is not where it is: its
// tokens could repeat ones handed out after its backup.
func (p *Ledger) checkHome(stored, current home) error {
	if p.rehome || !current.restoredFrom(stored) {
		return nil
	}
	err := fmt.Errorf("the ledger in schema %q was made in another database (restored from a backup?): its fencing tokens could repeat ones handed out since", p.schema)
	if stored.place == "" || stored.place == current.place {
		err = fmt.Errorf("the ledger in schema %q has another token sequence than the one it was made with (restored from a backup?): its fencing tokens could repeat ones handed out since", p.schema)
	}
	return &ledger.StoreError{Op: "open", Path: p.desc, Err: err, Hint: restoredHint}
}

// setHome records where the ledger is as its home, in tx (the ledger's
// owner's: it adds the columns when missing).
func (p *Ledger) setHome(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, p.q(`ALTER TABLE {schema}.meta ADD COLUMN IF NOT EXISTS home text, ADD COLUMN IF NOT EXISTS home_tokens text`)); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, p.q(`UPDATE {schema}.meta SET home = `+homeSQL+`, home_tokens = `+homeTokensSQL))
	return err
}

// moveHome makes a ledger restored here its home: the token sequence
// jumps to the server's clock in microseconds unless it is past it
// already. Tokens handed out before the backup's restore were drawn from
// a sequence that stayed below that (fewer than one token a microsecond
// since the last jump), so no token repeats. A ledger that recorded no
// home, or only part of it, gets it recorded, its tokens unmoved. It
// reports whether the ledger had been restored.
func (p *Ledger) moveHome(ctx context.Context) (bool, error) {
	moved := false
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if err := pin(ctx, tx); err != nil {
			return err
		}
		var stored, current home
		if err := tx.QueryRow(ctx, p.q(`SELECT `+homeColumnsSQL+`, `+homeSQL+`, `+homeTokensSQL+` FROM {schema}.meta m FOR UPDATE`)).
			Scan(&stored.place, &stored.tokens, &current.place, &current.tokens); err != nil {
			return err
		}
		if stored == current {
			return nil
		}
		if current.restoredFrom(stored) {
			moved = true
			if _, err := tx.Exec(ctx, p.q(`SELECT pg_catalog.setval('{schema}.tokens',
				greatest(t.last_value, (extract(epoch FROM pg_catalog.clock_timestamp()) * 1e6)::bigint)) FROM {schema}.tokens t`)); err != nil {
				return err
			}
		}
		return p.setHome(ctx, tx)
	})
	if sqlState(err) == "42501" {
		// A runtime role: it may use the ledger, not change it.
		return false, &ledger.StoreError{Op: "apply the schema", Path: p.desc,
			Err:  fmt.Errorf("this role may not change the ledger in schema %q (%w)", p.schema, err),
			Hint: fmt.Sprintf("run 'idem schema --apply' as the role that owns schema %q (the one that created it), not as a role given the run-time grants", p.schema)}
	}
	if err != nil {
		return false, p.wrap("record the ledger's home", err)
	}
	return moved, nil
}
