package sqlite_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

func userVersion(t *testing.T, path string) int64 {
	t.Helper()
	return int64(count(t, path, `SELECT user_version FROM pragma_user_version()`))
}

func setUserVersion(t *testing.T, path string, v ledger.SchemaVersions) {
	t.Helper()
	db := rawDB(t, path)
	execAll(t, db, `PRAGMA user_version = `+strconv.FormatInt(sqlite.EncodeVersions(v), 10))
	db.Close()
}

// newLedgerFile makes a closed v1 ledger with one finished record.
func newLedgerFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	finishNew(t, l, "evt:schema-1")
	l.Close()
	return path
}

func finishNew(t *testing.T, l ledger.Ledger, key string) {
	t.Helper()
	res := reserveNew(t, l, key)
	if err := l.Finish(context.Background(), ledger.FinishRequest{Key: key, Token: res.Token, AttemptID: res.AttemptID,
		Status: ledger.StatusSucceeded, ExitSource: "child", Class: ledger.ClassSuccess, OutputStored: true,
		Stdout: []byte("out " + key)}); err != nil {
		t.Fatalf("Finish(%s): %v", key, err)
	}
}

func TestSQLiteSchemaVersionIsMigrationCount(t *testing.T) {
	if n := len(sqlite.Migrations()); n != sqlite.SchemaVersion {
		t.Fatalf("%d migrations, SchemaVersion %d", n, sqlite.SchemaVersion)
	}
	for i, m := range sqlite.Migrations() {
		if m.Version != i+1 || m.Compat < 1 || m.Compat > m.Version {
			t.Errorf("migration %d: %+v; want Version %d and 1 <= Compat <= Version", i, m, i+1)
		}
	}
}

// TestSQLiteOpensLedgerWithAdditiveChanges: a ledger that a newer idem
// migrated with additive changes only (its write version is ahead, its
// compatibility version known) opens, reads and writes, and keeps its
// version markers.
func TestSQLiteOpensLedgerWithAdditiveChanges(t *testing.T) {
	path := newLedgerFile(t)
	ahead := ledger.SchemaVersions{Write: sqlite.SchemaVersion + 1, Compat: sqlite.SchemaVersion}
	setUserVersion(t, path, ahead)
	want := sqlite.EncodeVersions(ahead)

	ro, err := sqlite.OpenWith(context.Background(), path, ledger.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open of a ledger at %+v: %v", ahead, err)
	}
	if _, err := ro.Get(context.Background(), "evt:schema-1"); err != nil {
		t.Errorf("read-only Get: %v", err)
	}
	ro.Close()

	l := openSQLite(t, path)
	if r, err := l.Get(context.Background(), "evt:schema-1"); err != nil || string(r.Stdout) != "out evt:schema-1" {
		t.Fatalf("Get: %+v, %v", r, err)
	}
	finishNew(t, l, "evt:schema-2")
	l.Close()
	if got := userVersion(t, path); got != want {
		t.Errorf("user_version %#x after use, want %#x (left as the newer idem wrote it)", got, want)
	}
}

// TestSQLiteMigratesForward: an idem with a migration the ledger lacks
// applies it when it opens the ledger to write, never when it opens it to
// read; an additive migration leaves the ledger open to the older idem,
// another one does not.
func TestSQLiteMigratesForward(t *testing.T) {
	ctx := context.Background()
	path := newLedgerFile(t)
	known := sqlite.SchemaVersion
	compat := sqlite.Migrations()[known-1].Compat
	additive := append(sqlite.Migrations(), ledger.Migration{Version: known + 1, Compat: compat,
		SQL: `ALTER TABLE records ADD COLUMN note TEXT`})
	breaking := append(append([]ledger.Migration(nil), additive...), ledger.Migration{Version: known + 2, Compat: known + 2,
		SQL: `CREATE TABLE extra (id INTEGER PRIMARY KEY)`})

	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sqlite.OpenMigrations(ctx, path, ledger.Options{ReadOnly: true}, additive)
	var older *ledger.OlderSchemaError
	if !errors.As(err, &older) {
		t.Fatalf("read-only open by a newer idem: %v, want *OlderSchemaError", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatalf("a read-only open altered the ledger")
	}

	l, err := sqlite.OpenMigrations(ctx, path, ledger.Options{}, additive)
	if err != nil {
		t.Fatalf("open with an additive migration: %v", err)
	}
	l.Close()
	if got, want := userVersion(t, path), sqlite.EncodeVersions(ledger.SchemaVersions{Write: known + 1, Compat: compat}); got != want {
		t.Fatalf("user_version %#x after the additive migration, want %#x", got, want)
	}
	if n := count(t, path, `SELECT count(*) FROM pragma_table_info('records') WHERE name = 'note'`); n != 1 {
		t.Fatalf("the migration's column is missing")
	}

	// This idem, which knows only the versions before it, keeps working on it.
	l = openSQLite(t, path)
	finishNew(t, l, "evt:schema-2")
	if r, err := l.Get(ctx, "evt:schema-1"); err != nil || r.Status != ledger.StatusSucceeded {
		t.Fatalf("Get after the migration: %+v, %v", r, err)
	}
	l.Close()

	l, err = sqlite.OpenMigrations(ctx, path, ledger.Options{}, breaking)
	if err != nil {
		t.Fatalf("open with a breaking migration: %v", err)
	}
	l.Close()
	if got := userVersion(t, path); got != int64(known+2) {
		t.Fatalf("user_version %#x after the breaking migration, want %d", got, known+2)
	}
	before, _ = os.ReadFile(path)
	_, err = sqlite.Open(ctx, path)
	var se *ledger.StoreError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), fmt.Sprintf("written by a newer idem (schema v%d; this idem knows v%d)", known+2, known)) ||
		!strings.Contains(se.Hint, "upgrade idem") {
		t.Fatalf("open after a breaking migration: %v, want refused as newer", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatalf("the refused ledger was altered")
	}
}

// TestDamageOnlyQuickCheckSees: a one-page table whose page reads well
// but whose free space is misreported (its fragmented-bytes count one
// higher: a write there would corrupt it further) is refused by a
// writer's open as corrupt, naming the table, and the file is left as it
// was; a reader's open, which writes nothing, does not check the pages.
func TestDamageOnlyQuickCheckSees(t *testing.T) {
	dir := t.TempDir()
	pristine := filepath.Join(dir, "pristine.db")
	l, err := sqlite.Open(context.Background(), pristine)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	db := rawDB(t, pristine)
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	roots := map[string]int64{}
	for _, table := range []string{"counters", "token_mark", "totals", "run_guard"} {
		var root int64
		if err := db.QueryRow(`SELECT rootpage FROM sqlite_schema WHERE name = ?`, table).Scan(&root); err != nil {
			t.Fatal(err)
		}
		roots[table] = root
	}
	db.Close()
	clean, err := os.ReadFile(pristine)
	if err != nil {
		t.Fatal(err)
	}
	for table, root := range roots {
		t.Run(table, func(t *testing.T) {
			path := filepath.Join(dir, table+".db")
			b := bytes.Clone(clean)
			b[(root-1)*4096+7]++ // the page header's count of fragmented free bytes
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := sqlite.Open(context.Background(), path)
			if err == nil {
				l.Close()
				t.Fatalf("open of a ledger whose %s page misreports its free space: no error", table)
			}
			if want := "the database is corrupt (table " + table + ": "; !strings.Contains(err.Error(), want) {
				t.Errorf("open: %v; want %q", err, want)
			}
			if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, b) {
				t.Errorf("the refused ledger's file changed (%v)", err)
			}
			r, err := sqlite.OpenWith(context.Background(), path, ledger.Options{ReadOnly: true})
			if err != nil {
				t.Fatalf("read-only open: %v", err)
			}
			r.Close()
		})
	}
}
