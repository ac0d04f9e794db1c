package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/ledgertest"
	"github.com/idemhq/idem/internal/ledger/postgres"
)

// recordedHome reads table meta's home columns as an admin ("-" for a
// column that is not there).
func recordedHome(t *testing.T, schema string) (place, tokens string) {
	t.Helper()
	err := adminConn(t).QueryRow(context.Background(), `SELECT coalesce(to_jsonb(m)->>'home', '-'), coalesce(to_jsonb(m)->>'home_tokens', '-') FROM `+
		pgx.Identifier{schema, "meta"}.Sanitize()+` m`).Scan(&place, &tokens)
	if err != nil {
		t.Fatal(err)
	}
	return place, tokens
}

// hereHome is where a ledger in schema is: the home an older idem
// compares (system identifier and database) and its token sequence's OID.
func hereHome(t *testing.T, schema string) (place, tokens string) {
	t.Helper()
	err := adminConn(t).QueryRow(context.Background(), `SELECT
		(SELECT system_identifier::text FROM pg_control_system()) || ':' || (SELECT oid::text FROM pg_database WHERE datname = current_database()),
		to_regclass($1)::oid::text`, pgx.Identifier{schema, "tokens"}.Sanitize()).Scan(&place, &tokens)
	if err != nil {
		t.Fatal(err)
	}
	return place, tokens
}

// nextToken draws a token from the ledger's sequence, as a reservation
// does.
func nextToken(t *testing.T, schema string) int64 {
	t.Helper()
	var n int64
	if err := adminConn(t).QueryRow(context.Background(), `SELECT nextval($1)`, pgx.Identifier{schema, "tokens"}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A new ledger records its home in two columns: meta.home in the form an
// older idem compares whole (so that a fleet upgraded one host at a time
// keeps running), and its token sequence beside it. A ledger whose home an
// older idem recorded, or that has none, is not refused for that, and its
// owner's apply records the rest without moving its tokens; a ledger
// whose token sequence is not the one it recorded (re-created by a
// restore) is refused until its owner's apply moves the tokens.
func TestPostgresHomeForms(t *testing.T) {
	dsn := ledgertest.PostgresDSN(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		alter string // what an older idem left, or a restore changed
		moved bool
	}{
		{"current", ``, false},
		{"home-only", `ALTER TABLE {meta} DROP COLUMN home_tokens`, false},
		{"none", `ALTER TABLE {meta} DROP COLUMN home_tokens, DROP COLUMN home`, false},
		{"other-sequence", `UPDATE {meta} SET home_tokens = '1'`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := freshSchema(t)
			openLedger(t, dsn, schema).Close()
			for range 3 {
				nextToken(t, schema)
			}
			place, tokens := hereHome(t, schema)
			if p, tk := recordedHome(t, schema); p != place || tk != tokens {
				t.Fatalf("a new ledger recorded home %q, tokens %q; want %q (an older idem's form) and %q", p, tk, place, tokens)
			}
			if tc.alter != "" {
				if _, err := adminConn(t).Exec(ctx, strings.ReplaceAll(tc.alter, "{meta}", pgx.Identifier{schema, "meta"}.Sanitize())); err != nil {
					t.Fatal(err)
				}
			}
			l, err := postgres.OpenSchema(ctx, dsn, schema)
			if tc.moved {
				var se *ledger.StoreError
				if !errors.As(err, &se) || !strings.Contains(se.Err.Error(), "another token sequence") || !strings.Contains(se.Hint, "idem schema --apply") {
					t.Fatalf("open of a ledger whose token sequence was re-created: %v; want it refused, with the hint to apply", err)
				}
			} else if err != nil {
				t.Fatalf("open: %v; want the ledger accepted", err)
			} else {
				l.Close()
			}
			a, err := postgres.Apply(ctx, dsn, schema, nil)
			if err != nil {
				t.Fatal(err)
			}
			if a.Rehomed != tc.moved {
				t.Errorf("apply: rehomed %v, want %v", a.Rehomed, tc.moved)
			}
			if p, tk := recordedHome(t, schema); p != place || tk != tokens {
				t.Errorf("after apply: home %q, tokens %q; want %q and %q", p, tk, place, tokens)
			}
			openLedger(t, dsn, schema).Close()
			if next := nextToken(t, schema); (next > 1e15) != tc.moved || next <= 3 {
				t.Errorf("the token after apply is %d: want it past 3, and moved to the clock only if the ledger was restored (%v)", next, tc.moved)
			}
		})
	}
}
