package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/ledgertest"
	"github.com/idemhq/idem/internal/ledger/postgres"
)

func TestPostgresReadOnlyConformance(t *testing.T) {
	ledgertest.PostgresDSN(t)
	ledgertest.RunReadOnly(t, readOnlyOpener(ledgertest.PostgresDSN))
}

// readOnlyOpener opens, for ledgertest.RunReadOnly, a writer in a fresh
// schema of the database dsn names, and a read-only opener of the same.
func readOnlyOpener(dsn func(testing.TB) string) func(*testing.T, func() time.Time) (ledger.Ledger, func() (ledger.Ledger, error)) {
	return func(t *testing.T, now func() time.Time) (ledger.Ledger, func() (ledger.Ledger, error)) {
		dsn, schema := dsn(t), freshSchema(t)
		w := openLedger(t, dsn, schema)
		w.Now = now
		return w, func() (ledger.Ledger, error) {
			r, err := postgres.OpenSchemaWith(context.Background(), dsn, schema, ledger.Options{ReadOnly: true}, postgres.Migrations())
			if err != nil {
				return nil, err
			}
			r.Now = now
			return r, nil
		}
	}
}

// schemaExists reports whether the schema is there.
func schemaExists(t *testing.T, schema string) bool {
	t.Helper()
	var ok bool
	if err := adminConn(t).QueryRow(context.Background(), `SELECT to_regnamespace($1) IS NOT NULL`,
		pgx.Identifier{schema}.Sanitize()).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// metaVersions reads table meta as an admin: version, and compat or 0.
func metaVersions(t *testing.T, schema string) (version, compat int) {
	t.Helper()
	err := adminConn(t).QueryRow(context.Background(), `SELECT version, coalesce((to_jsonb(m)->>'compat')::integer, 0) FROM `+
		pgx.Identifier{schema, "meta"}.Sanitize()+` m`).Scan(&version, &compat)
	if err != nil {
		t.Fatal(err)
	}
	return version, compat
}

func setMeta(t *testing.T, schema string, version, compat int) {
	t.Helper()
	meta := pgx.Identifier{schema, "meta"}.Sanitize()
	if _, err := adminConn(t).Exec(context.Background(), `ALTER TABLE `+meta+` ADD COLUMN IF NOT EXISTS compat integer`); err != nil {
		t.Fatal(err)
	}
	if _, err := adminConn(t).Exec(context.Background(), `UPDATE `+meta+` SET version = $1, compat = $2`, version, compat); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresReadOnlyDoesNoDDL: a read-only open of a database without
// a ledger is ErrNoLedger and creates nothing; of one whose ledger is in
// another schema, an error naming that schema (a host without the
// fleet's IDEM_LEDGER_SCHEMA), not ErrNoLedger.
func TestPostgresReadOnlyDoesNoDDL(t *testing.T) {
	ctx := context.Background()
	empty, db, err := ledgertest.NewPostgresDatabase(ledgertest.PostgresDSN(t), t.Cleanup)
	if err != nil {
		t.Fatal(err)
	}
	_, err = postgres.OpenSchemaWith(ctx, empty, postgres.Schema, ledger.Options{ReadOnly: true}, postgres.Migrations())
	var se *ledger.StoreError
	if !errors.Is(err, ledger.ErrNoLedger) || !errors.As(err, &se) {
		t.Fatalf("read-only open of a database without a ledger: %v, want a *StoreError wrapping ErrNoLedger", err)
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, postgres.Schema).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a read-only open created schema %s: %d, %v", postgres.Schema, n, err)
	}

	dsn, fleet, schema := ledgertest.PostgresDSN(t), freshSchema(t), freshSchema(t)
	openLedger(t, dsn, fleet).Close()
	_, err = postgres.OpenSchemaWith(ctx, dsn, schema, ledger.Options{ReadOnly: true}, postgres.Migrations())
	if errors.Is(err, ledger.ErrNoLedger) || !errors.As(err, &se) || !strings.Contains(err.Error(), "this database holds one in schema") {
		t.Fatalf("read-only open beside another ledger: %v, want a *StoreError naming the other's schema", err)
	}
	if schemaExists(t, schema) {
		t.Fatalf("a read-only open created schema %s", schema)
	}
}

// TestPostgresOpensLedgerWithAdditiveChanges: a ledger whose write version
// is ahead but whose compatibility version this idem knows opens, for
// reading and writing, and keeps its markers.
func TestPostgresOpensLedgerWithAdditiveChanges(t *testing.T) {
	ctx := context.Background()
	dsn, schema := ledgertest.PostgresDSN(t), freshSchema(t)
	openLedger(t, dsn, schema).Close()
	setMeta(t, schema, postgres.SchemaVersion+1, postgres.SchemaVersion)

	r, err := postgres.OpenSchemaWith(ctx, dsn, schema, ledger.Options{ReadOnly: true}, postgres.Migrations())
	if err != nil {
		t.Fatalf("read-only open: %v", err)
	}
	r.Close()
	l := openLedger(t, dsn, schema)
	res, err := l.Reserve(ctx, ledger.ReserveRequest{Key: "evt:additive-1", Fingerprint: "fp", Command: []string{"true"},
		MaxAttempts: 1, Lease: time.Minute})
	if err != nil || res.Outcome != ledger.Reserved {
		t.Fatalf("Reserve: %+v, %v", res, err)
	}
	l.Close()
	if v, c := metaVersions(t, schema); v != postgres.SchemaVersion+1 || c != postgres.SchemaVersion {
		t.Errorf("meta after use: version %d compat %d, want %d and %d untouched", v, c, postgres.SchemaVersion+1, postgres.SchemaVersion)
	}
}

// TestPostgresRefusesIncompatibleSchema: a ledger whose compatibility
// version is ahead is refused, read-only or not, and left as it is.
func TestPostgresRefusesIncompatibleSchema(t *testing.T) {
	dsn, schema := ledgertest.PostgresDSN(t), freshSchema(t)
	openLedger(t, dsn, schema).Close()
	setMeta(t, schema, postgres.SchemaVersion+2, postgres.SchemaVersion+1)
	for _, readOnly := range []bool{false, true} {
		_, err := postgres.OpenSchemaWith(context.Background(), dsn, schema, ledger.Options{ReadOnly: readOnly}, postgres.Migrations())
		var se *ledger.StoreError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), fmt.Sprintf("newer idem (schema v%d, compatible from v%d; this idem knows v%d)",
			postgres.SchemaVersion+2, postgres.SchemaVersion+1, postgres.SchemaVersion)) ||
			!strings.Contains(se.Hint, "upgrade idem") {
			t.Fatalf("read-only %v: %v (hint %q); want refused as newer", readOnly, err, hintOf(err))
		}
	}
	if v, c := metaVersions(t, schema); v != postgres.SchemaVersion+2 || c != postgres.SchemaVersion+1 {
		t.Errorf("meta after the refusals: version %d compat %d, want %d and %d untouched", v, c, postgres.SchemaVersion+2, postgres.SchemaVersion+1)
	}
}

// TestPostgresMigratesForward: a writer applies the migrations the ledger
// lacks, a reader does not; an additive one leaves the ledger open to the
// idem before it, another one does not.
func TestPostgresMigratesForward(t *testing.T) {
	ctx := context.Background()
	dsn, schema := ledgertest.PostgresDSN(t), freshSchema(t)
	openLedger(t, dsn, schema).Close()
	ver, compat := postgres.SchemaVersion, postgres.Migrations()[postgres.SchemaVersion-1].Compat
	v0, c0 := metaVersions(t, schema)
	additive := append(postgres.Migrations(), ledger.Migration{Version: ver + 1, Compat: compat,
		SQL: `ALTER TABLE records ADD COLUMN note text`})
	breaking := append(append([]ledger.Migration(nil), additive...), ledger.Migration{Version: ver + 2, Compat: ver + 2,
		SQL: `CREATE TABLE extra (id integer)`})

	_, err := postgres.OpenSchemaWith(ctx, dsn, schema, ledger.Options{ReadOnly: true}, additive)
	var older *ledger.OlderSchemaError
	if !errors.As(err, &older) {
		t.Fatalf("read-only open by a newer idem: %v, want *OlderSchemaError", err)
	}
	if v, c := metaVersions(t, schema); v != v0 || c != c0 {
		t.Fatalf("a read-only open changed meta: version %d compat %d", v, c)
	}

	l, err := postgres.OpenSchemaWith(ctx, dsn, schema, ledger.Options{}, additive)
	if err != nil {
		t.Fatalf("open with an additive migration: %v", err)
	}
	l.Close()
	if v, c := metaVersions(t, schema); v != ver+1 || c != compat {
		t.Fatalf("meta after the additive migration: version %d compat %d, want %d and %d", v, c, ver+1, compat)
	}
	// This idem, which knows only its own migrations, keeps working on it.
	l = openLedger(t, dsn, schema)
	if _, err := l.Reserve(ctx, ledger.ReserveRequest{Key: "evt:migrated-1", Fingerprint: "fp", Command: []string{"true"},
		MaxAttempts: 1, Lease: time.Minute}); err != nil {
		t.Fatalf("Reserve after the additive migration: %v", err)
	}
	l.Close()

	l, err = postgres.OpenSchemaWith(ctx, dsn, schema, ledger.Options{}, breaking)
	if err != nil {
		t.Fatalf("open with a breaking migration: %v", err)
	}
	l.Close()
	if v, c := metaVersions(t, schema); v != ver+2 || c != ver+2 {
		t.Fatalf("meta after the breaking migration: version %d compat %d, want %d and %d", v, c, ver+2, ver+2)
	}
	if _, err := postgres.OpenSchema(ctx, dsn, schema); err == nil ||
		!strings.Contains(err.Error(), fmt.Sprintf("newer idem (schema v%d; this idem knows v%d)", ver+2, ver)) {
		t.Fatalf("open after a breaking migration: %v, want refused as newer", err)
	}
}
