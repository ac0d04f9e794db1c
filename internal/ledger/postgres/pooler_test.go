package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/ledgertest"
	"github.com/idemhq/idem/internal/ledger/postgres"
)

// bouncerOpener opens each test's ledger through PgBouncer in transaction
// mode, in a fresh schema.
func bouncerOpener(t *testing.T, now func() time.Time) ledger.Ledger {
	l := openLedger(t, ledgertest.PgBouncerDSN(t), freshSchema(t))
	l.Now = now
	return l
}

// The conformance suite through a PgBouncer in transaction mode, as it
// ships (no ignore_startup_parameters): no start-up parameter it refuses,
// no session state between transactions.
func TestPgBouncerConformance(t *testing.T) {
	ledgertest.PgBouncerDSN(t)
	ledgertest.Run(t, bouncerOpener)
}

// Listings, purge and metrics through PgBouncer in transaction mode.
func TestPgBouncerQueryConformance(t *testing.T) {
	ledgertest.PgBouncerDSN(t)
	ledgertest.RunQuery(t, bouncerOpener)
}

func TestPgBouncerReadOnlyConformance(t *testing.T) {
	ledgertest.PgBouncerDSN(t)
	ledgertest.RunReadOnly(t, readOnlyOpener(ledgertest.PgBouncerDSN))
}

// runOnce reserves key and records a success with output out; it fails
// the test unless the reservation was the first.
func runOnce(t *testing.T, l *postgres.Ledger, key string, out []byte) {
	t.Helper()
	ctx := context.Background()
	res, err := l.Reserve(ctx, ledger.ReserveRequest{Key: key, Fingerprint: "fp", Command: []string{"x"}, MaxAttempts: 1,
		Owner: ledger.Owner{Host: "h", PID: 1}, Lease: time.Minute})
	if err != nil || res.Outcome != ledger.Reserved {
		t.Fatalf("first Reserve of %s through %s: %+v, %v; want Reserved", key, l.Describe(), res, err)
	}
	if err := l.Finish(ctx, ledger.FinishRequest{Key: key, Token: res.Token, AttemptID: res.AttemptID,
		Status: ledger.StatusSucceeded, ExitSource: "child", Class: ledger.ClassSuccess, OutputStored: true, Stdout: out}); err != nil {
		t.Fatal(err)
	}
}

// replayOf reserves key again and fails the test unless it is a replay of
// output out.
func replayOf(t *testing.T, l *postgres.Ledger, key string, out []byte) {
	t.Helper()
	res, err := l.Reserve(context.Background(), ledger.ReserveRequest{Key: key, Fingerprint: "fp", Command: []string{"x"}, MaxAttempts: 1,
		Owner: ledger.Owner{Host: "h2", PID: 2}, Lease: time.Minute})
	if err != nil || res.Outcome != ledger.Replay || !bytes.Equal(res.Record.Stdout, out) {
		t.Fatalf("repeat of %s through %s: %+v, %v; want a replay of %q", key, l.Describe(), res, err, out)
	}
}

// A ledger reached through PgBouncer and directly is one ledger: a key
// run one way replays the other way, both ways round, and both see the
// same identity.
func TestPgBouncerOneLedgerBothWays(t *testing.T) {
	schema := freshSchema(t)
	pooled := openLedger(t, ledgertest.PgBouncerDSN(t), schema)
	direct := openLedger(t, ledgertest.PostgresDSN(t), schema)
	if pooled.Identity() != direct.Identity() || pooled.Identity() == "" {
		t.Errorf("identity through PgBouncer %q, directly %q; want one", pooled.Identity(), direct.Identity())
	}
	out := []byte{0, 1, '\\', 'x', 0xff, '\n'}
	runOnce(t, pooled, "evt:both-ways:1", out)
	replayOf(t, direct, "evt:both-ways:1", out)
	runOnce(t, direct, "evt:both-ways:2", out)
	replayOf(t, pooled, "evt:both-ways:2", out)
}

// The default schema is found by name, not through search_path: a role
// whose search_path puts public first (or only) reads and writes the same
// ledger as one that connects without it.
func TestPostgresIgnoresSearchPath(t *testing.T) {
	schema := freshSchema(t)
	u, err := url.Parse(ledgertest.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", "public")
	u.RawQuery = q.Encode()
	out := []byte("once\n")
	runOnce(t, openLedger(t, u.String(), schema), "evt:search-path:1", out)
	replayOf(t, openLedger(t, ledgertest.PostgresDSN(t), schema), "evt:search-path:1", out)
	var n int
	if err := adminConn(t).QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = 'records'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("public.records exists (%d, %v): a ledger went into public", n, err)
	}
}

// A database whose settings change every text format (DateStyle,
// bytea_output, TimeZone, IntervalStyle) reads and writes the ledger the
// same, through PgBouncer, where no start-up parameter could pin them.
func TestPgBouncerDatabaseFormats(t *testing.T) {
	bouncer := ledgertest.PgBouncerDSN(t)
	ctx := context.Background()
	admin := adminConn(t)
	name := freshSchema(t) // a fresh name, used for a database
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+name); err != nil {
		t.Fatalf("create database (the role needs CREATEDB): %v", err)
	}
	t.Cleanup(func() { admin.Exec(context.Background(), `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`) })
	for _, set := range []string{`DateStyle = 'SQL, DMY'`, `bytea_output = 'escape'`, `TimeZone = 'Asia/Kolkata'`, `IntervalStyle = 'sql_standard'`} {
		if _, err := admin.Exec(ctx, `ALTER DATABASE `+name+` SET `+set); err != nil {
			t.Fatal(err)
		}
	}
	u, err := url.Parse(bouncer)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	l := openLedger(t, u.String(), postgres.Schema)
	out := []byte{0, 1, 2, '\\', 'x', 0xfe, 0xff, '\n'}
	runOnce(t, l, "evt:formats:1", out)
	rec, err := l.Get(ctx, "evt:formats:1")
	if err != nil || !bytes.Equal(rec.Stdout, out) || rec.Finished.Before(rec.Created) ||
		time.Since(rec.Finished).Abs() > time.Hour {
		t.Fatalf("Get under other formats: %+v, %v", rec, err)
	}
	replayOf(t, l, "evt:formats:1", out)
	hist, err := l.History(ctx, "evt:formats:1")
	if err != nil || len(hist) != 1 || !hist[0].Ended.Equal(rec.Finished) {
		t.Fatalf("History under other formats: %+v, %v", hist, err)
	}
}

// runtimeRole returns the DSN of the least-privilege role and its name.
func runtimeRole(t *testing.T) (dsn, role string) {
	t.Helper()
	dsn = ledgertest.RuntimeDSN(t)
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		t.Fatalf("IDEM_TEST_POSTGRES_RUNTIME: want postgres://ROLE:PASSWORD@HOST/DB: %v", err)
	}
	return dsn, u.User.Username()
}

// runtimeOpener has the owner apply each test's schema with the runtime
// grants ('idem schema --apply --grant ROLE'), then opens it as the
// runtime role.
func runtimeOpener(t *testing.T, now func() time.Time) ledger.Ledger {
	dsn, role := runtimeRole(t)
	schema := freshSchema(t)
	if _, err := postgres.Apply(context.Background(), ledgertest.PostgresDSN(t), schema, []string{role}); err != nil {
		t.Fatalf("apply schema %s as the owner: %v", schema, err)
	}
	l := openLedger(t, dsn, schema)
	l.Now = now
	return l
}

// A runtime role with only the documented grants runs the conformance
// suite's run paths on a schema its owner applied.
func TestPostgresRuntimeRoleConformance(t *testing.T) {
	runtimeRole(t)
	ledgertest.Run(t, runtimeOpener)
}

// Each documented grant is needed: without any one of them, a run's
// statements fail with a permission error.
func TestPostgresRuntimeGrantsAreLeast(t *testing.T) {
	dsn, role := runtimeRole(t)
	ctx := context.Background()
	grants := postgres.RuntimeGrants("s", role)
	for i := range grants {
		t.Run(grants[i], func(t *testing.T) {
			schema := freshSchema(t)
			if _, err := postgres.Apply(ctx, ledgertest.PostgresDSN(t), schema, nil); err != nil {
				t.Fatal(err)
			}
			admin := adminConn(t)
			for j, g := range postgres.RuntimeGrants(schema, role) {
				if j == i {
					continue
				}
				if _, err := admin.Exec(ctx, g); err != nil {
					t.Fatal(err)
				}
			}
			err := runPaths(ctx, dsn, schema)
			var se *ledger.StoreError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), "permission denied") {
				t.Fatalf("without %q: %v; want permission denied", postgres.RuntimeGrants(schema, role)[i], err)
			}
		})
	}
}

// runPaths opens the ledger and takes every kind of run path: a new key
// with its outcome, a replay, a retry, a release, a purge (which adds to
// totals) and metrics.
func runPaths(ctx context.Context, dsn, schema string) error {
	l, err := postgres.OpenSchemaWith(ctx, dsn, schema, ledger.Options{}, postgres.Migrations())
	if err != nil {
		return err
	}
	defer l.Close()
	req := ledger.ReserveRequest{Key: "evt:paths:1", Fingerprint: "fp", Command: []string{"x"}, MaxAttempts: 3,
		Owner: ledger.Owner{Host: "h", PID: 1}, Lease: time.Minute}
	res, err := l.Reserve(ctx, req)
	if err != nil {
		return err
	}
	if err := l.Finish(ctx, ledger.FinishRequest{Key: req.Key, Token: res.Token, AttemptID: res.AttemptID,
		Status: ledger.StatusRetryable, ExitCode: 75, ExitSource: "child", Class: ledger.ClassTransient}); err != nil {
		return err
	}
	if res, err = l.Reserve(ctx, req); err != nil {
		return err
	}
	if err := l.Release(ctx, req.Key, res.Token, res.AttemptID, res.Prev); err != nil {
		return err
	}
	if _, err := l.Purge(ctx, ledger.PurgeRequest{Selector: ledger.Selector{Keys: []string{req.Key}}, Force: true}); err != nil {
		return err
	}
	_, err = l.Metrics(ctx, ledger.MetricsRequest{})
	return err
}

// A runtime role on a database without the ledger gets one error that
// names the DBA's command, and creates nothing.
func TestPostgresRuntimeRoleCannotCreate(t *testing.T) {
	dsn, _ := runtimeRole(t)
	schema := freshSchema(t)
	_, err := postgres.OpenSchema(context.Background(), dsn, schema)
	var se *ledger.StoreError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "this role may not create one") ||
		!strings.Contains(se.Hint, "idem schema --apply") {
		t.Fatalf("open as the runtime role without a schema: %v (hint %q); want the DBA command named", err, hintOf(err))
	}
	if schemaExists(t, schema) {
		t.Fatalf("the runtime role's open created schema %s", schema)
	}
}

// The SQL 'idem schema' prints makes the schema idem run makes: the same
// tables, columns, indexes, constraints and versions.
func TestSchemaSQLMatchesMigrations(t *testing.T) {
	ctx := context.Background()
	dsn := ledgertest.PostgresDSN(t)
	byRun, bySQL := freshSchema(t), freshSchema(t)
	openLedger(t, dsn, byRun)
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, postgres.SchemaSQL(bySQL, nil), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("apply the printed SQL: %v", err)
	}
	describe := func(schema string) string {
		var d string
		err := c.QueryRow(ctx, `SELECT string_agg(x, E'\n' ORDER BY x) FROM (
			SELECT format('%s.%s %s %s %s', table_name, column_name, data_type, is_nullable, coalesce(column_default, '')) FROM information_schema.columns WHERE table_schema = $1
			UNION ALL SELECT replace(indexdef, $1, 'S') FROM pg_indexes WHERE schemaname = $1
			UNION ALL SELECT conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = to_regnamespace($1)
			UNION ALL SELECT relname || ' ' || relkind::text FROM pg_class WHERE relnamespace = to_regnamespace($1)) s(x)`, schema).Scan(&d)
		if err != nil {
			t.Fatal(err)
		}
		return strings.ReplaceAll(d, schema, "S")
	}
	if a, b := describe(byRun), describe(bySQL); a != b {
		t.Errorf("schema by idem run:\n%s\n\nby the printed SQL:\n%s", a, b)
	}
	if v, c := metaVersions(t, bySQL); v != postgres.SchemaVersion || v != metaOf(t, byRun) || c != compatOf(t, byRun) {
		t.Errorf("versions by the printed SQL: %d/%d", v, c)
	}
	openLedger(t, dsn, bySQL) // and idem opens it as it is
}

func metaOf(t *testing.T, schema string) int   { v, _ := metaVersions(t, schema); return v }
func compatOf(t *testing.T, schema string) int { _, c := metaVersions(t, schema); return c }

// A URL's synchronous_commit is applied per transaction, not sent as a
// start-up parameter: it works through PgBouncer.
func TestPgBouncerSynchronousCommitParam(t *testing.T) {
	u, err := url.Parse(ledgertest.PgBouncerDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("synchronous_commit", "remote_write")
	u.RawQuery = q.Encode()
	l := openLedger(t, u.String(), freshSchema(t))
	runOnce(t, l, "evt:sync-param:1", []byte("ok\n"))
}

// Granting to a role that does not exist says to create it first.
func TestApplyGrantUnknownRole(t *testing.T) {
	_, err := postgres.Apply(context.Background(), ledgertest.PostgresDSN(t), freshSchema(t), []string{"idem_no_such_role"})
	var se *ledger.StoreError
	if !errors.As(err, &se) || !strings.Contains(se.Hint, "create that role") {
		t.Fatalf("Apply --grant idem_no_such_role: %v (hint %q), want a *StoreError saying to create the role", err, hintOf(err))
	}
}
