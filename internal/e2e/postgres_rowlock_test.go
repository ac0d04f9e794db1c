package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An outcome write that a row lock blocks (a transaction holding the
// key's record) fails at the end of its tries with exit 74 and a
// PostgreSQL hint that names the held lock, not a SQLite one about disks.
func TestPostgresOutcomeBehindHeldLock(t *testing.T) {
	quiet(t)
	dsn, db := pgDatabase(t)
	dir := t.TempDir()
	const key = "lock:outcome:1"
	ready, release := filepath.Join(dir, "ready"), filepath.Join(dir, "release")
	p := pgStartOnHost(t, dsn, "host-a", dir, nil, "run", "--key", key, "--lease", "4s", "--",
		"sh", "-c", `echo go > `+ready+`; while [ ! -e `+release+` ]; do sleep 0.05; done`)
	waitFileFields(t, ready, time.Minute)
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM idem.records WHERE key = $1 FOR UPDATE`, key); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p.wait()
	if p.code != 74 || !strings.Contains(p.stderr, "idem: hint: a transaction may hold the key's row lock: look for it in pg_stat_activity") ||
		strings.Contains(p.stderr, "disk and permissions") {
		t.Fatalf("%v: want exit 74 with a hint naming the row lock and pg_stat_activity", p)
	}
}
