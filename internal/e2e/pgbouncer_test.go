package e2e

// The shared PostgreSQL ledger through a PgBouncer in transaction mode
// (IDEM_TEST_PGBOUNCER, see needPgBouncer), least privilege, and read
// commands that must not create a ledger.

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// pgBouncerDSN is dsn (a test's own database) reached through the
// PgBouncer of bouncer, whose wildcard entry serves every database.
func pgBouncerDSN(t *testing.T, bouncer, dsn string) string {
	t.Helper()
	b, err := url.Parse(bouncer)
	if err != nil {
		t.Fatalf("IDEM_TEST_PGBOUNCER: %v", err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = b.Host
	return u.String()
}

// withRole is dsn with the user and password of role's DSN.
func withRole(t *testing.T, dsn, roleDSN string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	r, err := url.Parse(roleDSN)
	if err != nil {
		t.Fatal(err)
	}
	u.User = r.User
	return u.String()
}

// idemWith runs idem with IDEM_LEDGER=dsn and more NAME=VALUE.
func idemWith(t *testing.T, dsn string, env []string, args ...string) *process {
	t.Helper()
	return run(t, inherit(append([]string{"IDEM_LEDGER=" + dsn, "NO_COLOR=1"}, env...), "idem", args...))
}

func wantExit(t *testing.T, p *process, code int, stderr string) {
	t.Helper()
	if p.code != code || !strings.Contains(p.stderr, stderr) {
		t.Fatalf("%v: want exit %d and stderr containing %q", p, code, stderr)
	}
}

// A key run through PgBouncer replays when repeated directly, and one run
// directly replays through PgBouncer: one ledger, whichever way a host
// reaches it.
func TestPgBouncerOneLedgerBothWays(t *testing.T) {
	bouncer := needPgBouncer(t)
	direct, _ := pgDatabase(t)
	pooled := pgBouncerDSN(t, bouncer, direct)
	for _, way := range []struct{ key, first, then string }{
		{"evt:both-ways:pooled-first", pooled, direct},
		{"evt:both-ways:direct-first", direct, pooled},
	} {
		p := idemWith(t, way.first, nil, "run", "--key", way.key, "--", "echoargs", "ran "+way.key)
		wantExit(t, p, 0, "")
		if p.stdout != "ran "+way.key+"\n" || p.stderr != "" {
			t.Fatalf("first run: %v", p)
		}
		p = idemWith(t, way.then, nil, "run", "--key", way.key, "--", "echoargs", "ran "+way.key)
		wantExit(t, p, 0, "idem: replayed "+way.key+": succeeded")
		if p.stdout != "ran "+way.key+"\n" {
			t.Fatalf("repeat the other way: %v; want the first run's output replayed", p)
		}
	}
}

// Listings, metrics and purge through PgBouncer in transaction mode.
func TestPgBouncerListingsAndPurge(t *testing.T) {
	bouncer := needPgBouncer(t)
	direct, _ := pgDatabase(t)
	pooled := pgBouncerDSN(t, bouncer, direct)
	for _, k := range []string{"nightly:a:0001", "nightly:b:0002", "deploy:c:0003"} {
		wantExit(t, idemWith(t, pooled, nil, "run", "--key", k, "--", "echoargs", k), 0, "")
	}
	wantExit(t, idemWith(t, pooled, nil, "run", "--key", "nightly:f:0004", "--", "exitwith", "3"), 3, "")
	p := idemWith(t, pooled, nil, "inspect", "--prefix", "nightly:")
	wantExit(t, p, 0, "")
	for _, k := range []string{"nightly:a:0001", "nightly:b:0002", "nightly:f:0004"} {
		if !strings.Contains(p.stdout, k) {
			t.Errorf("inspect --prefix nightly: lacks %s: %v", k, p)
		}
	}
	if strings.Contains(p.stdout, "deploy:c:0003") {
		t.Errorf("inspect --prefix nightly: lists deploy:c:0003: %v", p)
	}
	p = idemWith(t, pooled, nil, "inspect", "--status", "failed", "--json")
	wantExit(t, p, 0, "")
	if !strings.Contains(p.stdout, `"nightly:f:0004"`) || strings.Contains(p.stdout, `"nightly:a:0001"`) {
		t.Errorf("inspect --status failed: %v", p)
	}
	p = idemWith(t, pooled, nil, "metrics")
	wantExit(t, p, 0, "")
	if !strings.Contains(p.stdout, "idem_") {
		t.Errorf("metrics: %v", p)
	}
	p = idemWith(t, pooled, nil, "purge", "--prefix", "nightly:", "--status", "succeeded")
	wantExit(t, p, 0, "removed 2 records")
	p = idemWith(t, pooled, nil, "inspect", "--json")
	wantExit(t, p, 0, "")
	if strings.Contains(p.stdout, `"nightly:a:0001"`) || !strings.Contains(p.stdout, `"deploy:c:0003"`) || !strings.Contains(p.stdout, `"nightly:f:0004"`) {
		t.Errorf("after the purge: %v", p)
	}
}

// schemaCount counts schemas named idem in the database db is connected to.
func schemaCount(t *testing.T, db *pgx.Conn) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname = 'idem'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Commands that read or remove records create nothing in a database
// without a ledger: no schema, no table.
func TestPostgresReadCommandsCreateNothing(t *testing.T) {
	dsn, db := pgDatabase(t)
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"inspect"}, 0, ""},
		{[]string{"inspect", "evt:nothing:1"}, 1, "no ledger at"},
		{[]string{"inspect", "--json"}, 0, ""},
		{[]string{"metrics"}, 0, ""},
		{[]string{"purge", "--all", "--dry-run"}, 0, "nothing to purge: no ledger at"},
		{[]string{"purge", "evt:nothing:1"}, 0, "nothing to purge: no ledger at"},
		{[]string{"purge", "--all"}, 0, "nothing to purge: no ledger at"},
		{[]string{"purge", "--expired", "--vacuum"}, 0, "nothing to purge: no ledger at"},
	} {
		p := idemWith(t, dsn, nil, c.args...)
		if p.code != c.code || !strings.Contains(p.stderr, c.stderr) {
			t.Errorf("%v: want exit %d and stderr containing %q", p, c.code, c.stderr)
		}
		if n := schemaCount(t, db); n != 0 {
			t.Fatalf("idem %s created the ledger's schema", strings.Join(c.args, " "))
		}
	}
}

// The DBA's way: the owner applies the schema with 'idem schema --apply
// --grant ROLE'; the runtime role, which may create nothing, then runs,
// replays, lists and purges through PgBouncer. Before that, the runtime
// role gets one error naming the DBA command, and the database stays
// without a ledger.
func TestPostgresRuntimeRoleThroughPgBouncer(t *testing.T) {
	bouncer := needPgBouncer(t)
	runtimeDSN, role := needRuntimeRole(t)
	owner, db := pgDatabase(t)
	runtime := withRole(t, pgBouncerDSN(t, bouncer, owner), runtimeDSN)

	p := idemWith(t, runtime, nil, "run", "--key", "evt:runtime:1", "--", "echoargs", "once")
	wantExit(t, p, 74, `has no ledger, and this role may not create one`)
	if !strings.Contains(p.stderr, "idem: hint: have the ledger's owner run 'idem schema --apply --grant ROLE'") || p.stdout != "" {
		t.Fatalf("%v: want the DBA command named, and the command not run", p)
	}
	if n := schemaCount(t, db); n != 0 {
		t.Fatal("the runtime role's run created the schema")
	}

	p = idemWith(t, owner, nil, "schema", "--apply", "--grant", role)
	wantExit(t, p, 0, `idem: created the ledger in schema "idem" at v`)
	wantExit(t, idemWith(t, owner, nil, "schema", "--apply", "--grant", role), 0, `idem: the ledger in schema "idem" is at v`)

	p = idemWith(t, runtime, nil, "run", "--key", "evt:runtime:1", "--", "echoargs", "once")
	wantExit(t, p, 0, "")
	if p.stdout != "once\n" {
		t.Fatalf("%v", p)
	}
	wantExit(t, idemWith(t, runtime, nil, "run", "--key", "evt:runtime:1", "--", "echoargs", "once"), 0, "idem: replayed evt:runtime:1")
	wantExit(t, idemWith(t, runtime, nil, "inspect", "evt:runtime:1"), 0, "")
	wantExit(t, idemWith(t, runtime, nil, "purge", "evt:runtime:1"), 0, "removed 1 record")
	// Compacting needs the owner: refused before anything is removed.
	wantExit(t, idemWith(t, runtime, nil, "run", "--key", "evt:runtime:2", "--", "echoargs", "kept"), 0, "")
	wantExit(t, idemWith(t, runtime, nil, "purge", "--all", "--vacuum"), 74, "only the owner of the ledger's tables may compact them")
	wantExit(t, idemWith(t, runtime, nil, "inspect", "evt:runtime:2"), 0, "")
}

// ungrantedLedger is a database of the test's own whose ledger its owner
// applied, granting the runtime role nothing: the owner's and the runtime
// role's DSNs, the role, and a connection as the owner.
func ungrantedLedger(t *testing.T) (owner, runtime, role string, db *pgx.Conn) {
	t.Helper()
	runtimeDSN, role := needRuntimeRole(t)
	owner, db = pgDatabase(t)
	runtime = withRole(t, owner, runtimeDSN)
	wantExit(t, idemWith(t, owner, nil, "schema", "--apply"), 0, `idem: created the ledger in schema "idem"`)
	return owner, runtime, role, db
}

// grant runs the GRANT statements as the owner.
func grant(t *testing.T, db *pgx.Conn, grants ...string) {
	t.Helper()
	for _, g := range grants {
		if _, err := db.Exec(context.Background(), g); err != nil {
			t.Fatalf("%s: %v", g, err)
		}
	}
}

// idem check as a runtime role names the rights it lacks, as the GRANTs
// to run (a role set up by hand opens the ledger and replays, and fails
// only when a purge or an outcome writes where it may not), and passes a
// role with every grant.
func TestPostgresCheckNamesMissingGrants(t *testing.T) {
	owner, runtime, role, db := ungrantedLedger(t)
	grant(t, db, `GRANT USAGE ON SCHEMA idem TO `+role, `GRANT SELECT ON idem.meta TO `+role,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON idem.records, idem.attempts TO `+role)
	p := idemWith(t, runtime, nil, "check")
	wantExit(t, p, 74, "role "+role+" lacks 7 of the rights a run needs")
	q := `"` + role + `"`
	for _, want := range []string{`GRANT SELECT ON "idem".totals TO ` + q + ";", `GRANT UPDATE ON "idem".last_success TO ` + q + ";",
		`GRANT USAGE ON SEQUENCE "idem".tokens TO ` + q + ";"} {
		if !strings.Contains(p.stdout, want+"\n") {
			t.Errorf("check: %v; want the line %q", p, want)
		}
	}
	if strings.Contains(p.stdout, "records") || !strings.Contains(p.stderr, "idem: hint: have the ledger's owner run 'idem schema --apply --grant ROLE'") {
		t.Errorf("check: %v; want only what is missing, and the owner's command", p)
	}
	wantExit(t, idemWith(t, owner, nil, "schema", "--apply", "--grant", role), 0, "")
	if p := idemWith(t, runtime, nil, "check"); p.code != 0 || !strings.Contains(p.stdout, "schema usable by this idem") {
		t.Fatalf("check with every grant: %v; want 0", p)
	}
	// schema --apply is the owner's: the runtime role is told so.
	if p := idemWith(t, runtime, nil, "schema", "--apply"); p.code != 74 ||
		!strings.Contains(p.stderr, `apply the schema: this role may not change the ledger in schema "idem"`) ||
		!strings.Contains(p.stderr, `idem: hint: run 'idem schema --apply' as the role that owns schema "idem"`) {
		t.Errorf("schema --apply as the runtime role: %v; want 74 saying it is the owner's", p)
	}
	if p := idemWith(t, owner, nil, "check"); p.code != 0 {
		t.Fatalf("check as the owner: %v; want 0", p)
	}
}

// The rights a run needs given another way than idem schema --grant
// does: on every column of the tables only added to, and UPDATE rather
// than USAGE on the token sequence (nextval takes either). idem check
// passes, and so do the commands.
func TestPostgresCheckRightsGivenOtherwise(t *testing.T) {
	_, runtime, role, db := ungrantedLedger(t)
	ctx := context.Background()
	grants := []string{`GRANT USAGE ON SCHEMA idem TO ` + role, `GRANT SELECT ON idem.meta TO ` + role,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON idem.records, idem.attempts TO ` + role, `GRANT UPDATE ON SEQUENCE idem.tokens TO ` + role}
	for _, table := range []string{"idem.totals", "idem.last_success"} {
		var cols string
		if err := db.QueryRow(ctx, `SELECT string_agg(quote_ident(attname), ', ') FROM pg_attribute
			WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, table).Scan(&cols); err != nil {
			t.Fatal(err)
		}
		grants = append(grants, "GRANT SELECT ("+cols+"), INSERT ("+cols+"), UPDATE ("+cols+") ON "+table+" TO "+role)
	}
	grant(t, db, grants...)
	if p := idemWith(t, runtime, nil, "check"); p.code != 0 || !strings.Contains(p.stdout, "schema usable by this idem") {
		t.Fatalf("check: %v; want 0", p)
	}
	wantExit(t, idemWith(t, runtime, nil, "run", "--key", "evt:otherwise:1", "--", "echoargs", "ran"), 0, "")
	wantExit(t, idemWith(t, runtime, nil, "metrics"), 0, "")
	wantExit(t, idemWith(t, runtime, nil, "purge", "evt:otherwise:1"), 0, "removed 1 record")
}

// Tables of an application that happen to be named meta, records and
// attempts, in another schema or as a session's temporary tables, are no
// ledger: the commands that only look still find none ("not created
// yet"), and a run makes the ledger.
func TestPostgresOtherTablesAreNoLedger(t *testing.T) {
	dsn, db := pgDatabase(t)
	ctx := context.Background()
	for _, q := range []string{`CREATE SCHEMA app`, `CREATE TABLE app.meta (x int)`, `CREATE TABLE app.records (x int)`, `CREATE TABLE app.attempts (x int)`,
		`CREATE TEMP TABLE meta (version int)`, `CREATE TEMP TABLE records (x int)`, `CREATE TEMP TABLE attempts (x int)`} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if p := idemWith(t, dsn, nil, "inspect"); p.code != 0 || !strings.Contains(p.stdout, "(not created yet)") {
		t.Fatalf("inspect: %v; want 0 and no ledger yet", p)
	}
	// check has nothing to check: it says how a PostgreSQL ledger comes
	// to be, not to check a file's path.
	if p := idemWith(t, dsn, nil, "check"); p.code != 74 || !strings.Contains(p.stderr, "check: no ledger there") ||
		!strings.Contains(p.stderr, "idem: hint: check --ledger, IDEM_LEDGER and IDEM_LEDGER_SCHEMA; the ledger's owner creates schema \"idem\" with 'idem schema --apply'") {
		t.Fatalf("check: %v; want 74 and how a ledger's schema is made", p)
	}
	wantExit(t, idemWith(t, dsn, nil, "metrics"), 0, "")
	wantExit(t, idemWith(t, dsn, nil, "run", "--key", "evt:app-tables:1", "--", "echoargs", "ran"), 0, "")
}

// IDEM_LEDGER_SCHEMA puts the ledger in a schema of that name, for every
// command and for 'idem schema'; a name that needs quoting is a usage
// error, and nothing is created.
func TestPostgresLedgerSchemaVar(t *testing.T) {
	dsn, db := pgDatabase(t)
	staging := []string{"IDEM_LEDGER_SCHEMA=staging_fleet"}
	p := idemWith(t, dsn, staging, "run", "--key", "evt:schema-var:1", "--", "echoargs", "staging")
	wantExit(t, p, 0, "")
	wantExit(t, idemWith(t, dsn, staging, "run", "--key", "evt:schema-var:1", "--", "echoargs", "staging"), 0, "idem: replayed evt:schema-var:1")
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM staging_fleet.records`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("records in schema staging_fleet: %d, %v; want 1", n, err)
	}
	if c := schemaCount(t, db); c != 0 {
		t.Fatal("a run with IDEM_LEDGER_SCHEMA created schema idem")
	}
	// Listings name the schema, so ledgers of one database are told apart.
	if p := idemWith(t, dsn, staging, "inspect"); p.code != 0 || !strings.Contains(p.stdout, " (schema staging_fleet)\n") {
		t.Fatalf("%v: want exit 0 and the ledger's line naming schema staging_fleet", p)
	}
	// So do the metrics' ledger label and a report's ledger.
	if p := idemWith(t, dsn, staging, "metrics"); p.code != 0 || !strings.Contains(p.stdout, ` (schema staging_fleet)"}`) {
		t.Fatalf("%v: want exit 0 and the ledger label naming schema staging_fleet", p)
	}
	report := filepath.Join(t.TempDir(), "r.json")
	wantExit(t, idemWith(t, dsn, staging, "run", "--report", report, "--key", "evt:schema-var:1", "--", "echoargs", "staging"), 0, "idem: replayed")
	if b, err := os.ReadFile(report); err != nil || !strings.Contains(string(b), ` (schema staging_fleet)"`) {
		t.Fatalf("report: %s, %v; want its ledger naming schema staging_fleet", b, err)
	}
	p = idemWith(t, dsn, nil, "schema")
	wantExit(t, p, 0, "")
	if !strings.Contains(p.stdout, `CREATE SCHEMA "idem";`) {
		t.Errorf("idem schema: %v", p)
	}
	p = idemWith(t, dsn, staging, "schema", "--grant", "idem_app")
	wantExit(t, p, 0, "")
	if !strings.Contains(p.stdout, `CREATE SCHEMA "staging_fleet";`) || !strings.Contains(p.stdout, `GRANT USAGE ON SEQUENCE "staging_fleet".tokens TO "idem_app";`) {
		t.Errorf("idem schema with IDEM_LEDGER_SCHEMA and --grant: %v", p)
	}
	for _, c := range [][]string{{"run", "--key", "evt:schema-var:2", "--", "echoargs", "x"}, {"inspect"}, {"schema"}} {
		p := idemWith(t, dsn, []string{"IDEM_LEDGER_SCHEMA=Staging-Fleet"}, c...)
		wantExit(t, p, 64, `idem: error: IDEM_LEDGER_SCHEMA: invalid schema name "Staging-Fleet"`)
	}
	wantExit(t, idemWith(t, dsn, nil, "schema", "--grant", ""), 64, "--grant is empty")
	wantExit(t, idemWith(t, t.TempDir()+"/ledger.db", nil, "schema", "--apply"), 64, "idem schema --apply is for a PostgreSQL ledger")
}

// A host that forgot the fleet's IDEM_LEDGER_SCHEMA does not start a
// second ledger beside the fleet's (the same key would run twice): it is
// refused, told the schema to use, and nothing is created; a second ledger
// is made only on purpose, with 'idem schema --apply'.
func TestPostgresNoSecondLedgerUnasked(t *testing.T) {
	dsn, db := pgDatabase(t)
	staging := []string{"IDEM_LEDGER_SCHEMA=staging_fleet"}
	wantExit(t, idemWith(t, dsn, staging, "run", "--key", "evt:beside:1", "--", "echoargs", "once"), 0, "")
	p := idemWith(t, dsn, nil, "run", "--key", "evt:beside:1", "--", "echoargs", "twice")
	wantExit(t, p, 74, `this database holds one in schema "staging_fleet"`)
	if !strings.Contains(p.stderr, "idem: hint: this database's ledger is in schema \"staging_fleet\": set IDEM_LEDGER_SCHEMA=staging_fleet") || p.stdout != "" {
		t.Fatalf("%v: want the fleet's schema named, and the command not run", p)
	}
	if c := schemaCount(t, db); c != 0 {
		t.Fatal("the refused run created schema idem")
	}
	// Nor do the commands that only look or remove show an empty ledger
	// (or metrics of zeros) where the fleet's is.
	for _, c := range [][]string{{"inspect"}, {"inspect", "evt:beside:1"}, {"metrics"}, {"purge", "--all"}, {"purge", "--all", "--dry-run"}, {"check"}} {
		p := idemWith(t, dsn, nil, c...)
		wantExit(t, p, 74, `schema "idem" has no ledger, and this database holds one in schema "staging_fleet"`)
		if !strings.Contains(p.stderr, `idem: hint: this database's ledger is in schema "staging_fleet": set IDEM_LEDGER_SCHEMA=staging_fleet`) || p.stdout != "" {
			t.Errorf("%q: %v; want the fleet's schema named, and nothing on stdout", c, p)
		}
	}
	if c := schemaCount(t, db); c != 0 {
		t.Fatal("a refused command created schema idem")
	}
	wantExit(t, idemWith(t, dsn, nil, "schema", "--apply"), 0, `idem: created the ledger in schema "idem"`)
	p = idemWith(t, dsn, nil, "run", "--key", "evt:beside:1", "--", "echoargs", "second ledger")
	wantExit(t, p, 0, "")
	if p.stdout != "second ledger\n" {
		t.Fatalf("%v", p)
	}
}
