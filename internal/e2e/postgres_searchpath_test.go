package e2e

// A hostile search_path on the ledger's database and on the role that
// runs: a schema that shadows now(), clock_timestamp(), nextval(),
// set_config() and = must not reach idem's tokens, leases or keys,
// directly or through PgBouncer in transaction mode.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// evilSchema shadows what idem's SQL names: a clock stuck in 2000, a
// token sequence that always says 42, a set_config that sets nothing and
// an = on text and bigint that is always true.
const evilSchema = `
CREATE SCHEMA evil;
GRANT USAGE ON SCHEMA evil TO PUBLIC;
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql AS $$ SELECT '2000-01-01 00:00:00+00'::pg_catalog.timestamptz $$;
CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT '2000-01-01 00:00:00+00'::pg_catalog.timestamptz $$;
CREATE FUNCTION evil.nextval(regclass) RETURNS bigint LANGUAGE sql AS $$ SELECT 42::pg_catalog.int8 $$;
CREATE FUNCTION evil.set_config(text, text, boolean) RETURNS text LANGUAGE sql AS $$ SELECT 'evil'::pg_catalog.text $$;
CREATE FUNCTION evil.texteq(text, text) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$;
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.texteq);
CREATE FUNCTION evil.int8eq(bigint, bigint) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$;
CREATE OPERATOR evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.int8eq);
`

func TestPostgresHostileSearchPath(t *testing.T) {
	timed(t)
	for _, tc := range []struct {
		name, set string // set: the ALTER that makes search_path hostile, %s the database
	}{
		{"database", `ALTER DATABASE %s SET search_path = evil, pg_catalog`},
		{"role", `ALTER ROLE CURRENT_USER IN DATABASE %s SET search_path = evil, pg_catalog, public`},
	} {
		for _, via := range []string{"direct", "pgbouncer"} {
			t.Run(tc.name+"/"+via, func(t *testing.T) {
				dsn, db := pgDatabase(t)
				ctx := context.Background()
				if _, err := db.Exec(ctx, evilSchema); err != nil {
					t.Fatal(err)
				}
				if _, err := db.Exec(ctx, strings.Replace(tc.set, "%s", pgx.Identifier{db.Config().Database}.Sanitize(), 1)); err != nil {
					t.Fatal(err)
				}
				ledger := dsn
				if via == "pgbouncer" {
					ledger = pgBouncerDSN(t, needPgBouncer(t), dsn)
				}
				hostileSearchPath(t, ledger, db)
			})
		}
	}
}

func hostileSearchPath(t *testing.T, dsn string, db *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	job := `echo "$IDEM_TOKEN" >> ` + tokens + `; echo "out:$1"`
	for _, k := range []string{"hostile:one", "hostile:two", "hostile:three"} {
		p := idemWith(t, dsn, nil, "run", "--key", k, "--", "sh", "-c", job, "sh", k)
		wantExit(t, p, 0, "")
	}
	if got := strings.Join(pgLines(t, tokens), " "); got != "1 2 3" {
		t.Fatalf("tokens handed out: %q, want \"1 2 3\"", got)
	}
	// A replay finds its own key, and only it counts one.
	p := idemWith(t, dsn, nil, "run", "--key", "hostile:two", "--", "sh", "-c", job, "sh", "hostile:two")
	wantExit(t, p, 0, "")
	if p.stdout != "out:hostile:two\n" {
		t.Fatalf("replay of key two printed %q", p.stdout)
	}
	// The test's own session gets the hostile search_path too: qualify.
	var replays int64
	var created time.Time
	if err := db.QueryRow(ctx, `SELECT pg_catalog.sum(replays)::pg_catalog.int8, pg_catalog.min(created) FROM idem.records`).
		Scan(&replays, &created); err != nil {
		t.Fatal(err)
	}
	if replays != 1 || created.Year() < 2020 {
		t.Fatalf("records hold %d replays (want 1), created %v (want the server's real clock)", replays, created)
	}
	// A lease runs from the real clock: while the command runs, its lease
	// ends in the future.
	ready := filepath.Join(dir, "ready")
	c := inherit([]string{"IDEM_LEDGER=" + dsn, "NO_COLOR=1"}, "idem", "run", "--key", "hostile:held", "--",
		"sh", "-c", `echo go > `+ready+`; while [ -e `+ready+` ]; do sleep 0.05; done`)
	held := start(t, c)
	waitFileFields(t, ready, time.Minute)
	var live bool
	if err := db.QueryRow(ctx, `SELECT lease_expires OPERATOR(pg_catalog.>) pg_catalog.now() FROM idem.records
		WHERE key OPERATOR(pg_catalog.=) 'hostile:held'`).Scan(&live); err != nil {
		t.Fatal(err)
	}
	os.Remove(ready)
	held.wait()
	if held.code != 0 || !live {
		t.Fatalf("%v; lease live while it ran: %v", held, live)
	}
}
