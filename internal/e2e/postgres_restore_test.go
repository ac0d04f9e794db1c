package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/ledger/ledgertest"
)

// The documented backup and restore of a PostgreSQL ledger (pg_dump
// --schema=idem, psql into a fresh database) hands out no token twice:
// tokens 1 2 3, the dump, 4 5 6; the restored ledger refuses runs (exit
// 74, nothing run) until its owner runs 'idem schema --apply', after which
// every token is past 6.
func TestPostgresRestoreKeepsTokensAhead(t *testing.T) {
	pgDump, psql := needTool(t, "pg_dump"), needTool(t, "psql")
	dsn, _ := pgDatabase(t)
	job, tokens, dump := dumpBetweenRuns(t, pgDump, dsn)
	restored, _, err := ledgertest.NewPostgresDatabase(needPostgres(t), t.Cleanup)
	if err != nil {
		t.Fatal(err)
	}
	output(t, inherit(nil, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", dump, restored))
	os.Remove(tokens)
	p := job(restored, "restore:b:1")
	wantExit(t, p, 74, "idem: hint: after restoring a ledger, have its owner run 'idem schema --apply' once")
	if got := pgLines(t, tokens); got != nil {
		t.Fatalf("the restored ledger handed out tokens %q before its owner moved them", got)
	}
	wantExit(t, idemWith(t, restored, nil, "schema", "--apply"), 0, "was restored from a backup")
	for i := 1; i <= 3; i++ {
		wantExit(t, job(restored, "restore:b:"+strconv.Itoa(i)), 0, "")
	}
	got := pgLines(t, tokens)
	for _, tok := range got {
		if n, err := strconv.ParseInt(tok, 10, 64); err != nil || n <= 6 {
			t.Fatalf("the restored ledger handed out tokens %s: want each past 6", strings.Join(got, " "))
		}
	}
	if len(got) != 3 {
		t.Fatalf("tokens %q: want 3", got)
	}
	// The original ledger, where it always was, runs on unrefused.
	wantExit(t, job(dsn, "restore:a:7"), 0, "")
}

// The same backup restored over the ledger in its own database (its
// schema dropped, then the plain dump through psql: the cluster and the
// database are the same, the token sequence is a new one) is refused as
// well, directly and through PgBouncer, until its owner's apply moves the
// tokens past any handed out.
func TestPostgresRestoreOverItself(t *testing.T) {
	pgDump, psql := needTool(t, "pg_dump"), needTool(t, "psql")
	bouncer := needPgBouncer(t)
	dsn, _ := pgDatabase(t)
	job, tokens, dump := dumpBetweenRuns(t, pgDump, dsn)
	output(t, inherit(nil, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", "DROP SCHEMA idem CASCADE", dsn))
	output(t, inherit(nil, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", dump, dsn))
	os.Remove(tokens)
	for _, via := range []string{dsn, pgBouncerDSN(t, bouncer, dsn)} {
		wantExit(t, job(via, "restore:a:4"), 74, "idem: hint: after restoring a ledger, have its owner run 'idem schema --apply' once")
	}
	if got := pgLines(t, tokens); got != nil {
		t.Fatalf("the restored ledger handed out tokens %q before its owner moved them", got)
	}
	wantExit(t, idemWith(t, dsn, nil, "schema", "--apply"), 0, "was restored from a backup")
	wantExit(t, job(dsn, "restore:a:4"), 0, "")
	wantExit(t, job(pgBouncerDSN(t, bouncer, dsn), "restore:a:5"), 0, "")
	got := pgLines(t, tokens)
	for _, tok := range got {
		if n, err := strconv.ParseInt(tok, 10, 64); err != nil || n <= 6 {
			t.Fatalf("the restored ledger handed out tokens %s: want each past 6", strings.Join(got, " "))
		}
	}
	if len(got) != 2 {
		t.Fatalf("tokens %q: want 2", got)
	}
}

// dumpBetweenRuns runs keys restore:a:1 to 3 on the ledger at dsn, dumps
// its schema (pg_dump --schema=idem) to the file dump, and runs keys 4 to
// 6. job runs a key on a ledger; each run appends its token to the file
// tokens.
func dumpBetweenRuns(t *testing.T, pgDump, dsn string) (job func(ledger, key string) *process, tokens, dump string) {
	t.Helper()
	dir := t.TempDir()
	tokens = filepath.Join(dir, "tokens")
	job = func(ledger, key string) *process {
		return idemWith(t, ledger, nil, "run", "--key", key, "--", "sh", "-c", `echo "$IDEM_TOKEN" >> `+tokens)
	}
	for i := 1; i <= 3; i++ {
		wantExit(t, job(dsn, "restore:a:"+strconv.Itoa(i)), 0, "")
	}
	dump = filepath.Join(dir, "idem.sql")
	output(t, inherit(nil, pgDump, "--schema=idem", "--file", dump, dsn))
	for i := 4; i <= 6; i++ {
		wantExit(t, job(dsn, "restore:a:"+strconv.Itoa(i)), 0, "")
	}
	return job, tokens, dump
}
