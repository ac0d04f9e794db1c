package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// newLedger opens a new ledger in the test's directory, closed when the
// test ends, and returns it with its path.
func newLedger(t testing.TB) (*Ledger, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, path
}

// openForWrites opens a new ledger and a second connection to its file,
// as another process would have.
func openForWrites(t *testing.T) (*Ledger, *sql.Conn) {
	t.Helper()
	l, path := newLedger(t)
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	other, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	return l, other
}

func bump(ctx context.Context, tx querier) error {
	_, err := tx.ExecContext(ctx, `UPDATE counters SET value = value + 1 WHERE name = 'token'`)
	return err
}

func tokenCounter(t *testing.T, l *Ledger) int64 {
	t.Helper()
	var v int64
	if err := l.conn.QueryRowContext(context.Background(), `SELECT value FROM counters WHERE name = 'token'`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestWriteWaitEndsWithCtx: while another connection holds the write
// lock, a write's wait for it ends with its context's deadline (not
// with SQLite's busy timeout, which would report SQLITE_BUSY), and once
// the lock is free the next write lands: nothing of the first is left
// open on the connection.
func TestWriteWaitEndsWithCtx(t *testing.T) {
	l, other := openForWrites(t)
	bg := context.Background()
	if _, err := other.ExecContext(bg, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel()
	err := l.write(ctx, "test", bump)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write behind a held lock: %v, want the deadline's error", err)
	}
	if _, err := other.ExecContext(bg, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	before := tokenCounter(t, l)
	if err := l.write(bg, "test", bump); err != nil {
		t.Fatalf("write after the lock was released: %v", err)
	}
	if got := tokenCounter(t, l); got != before+1 {
		t.Errorf("counter %d after one write from %d", got, before)
	}
}

// TestWriteStatementsOutliveCtx: once a write holds the lock, the end of
// its context does not interrupt its statements or its commit (see
// writeOnce): the transaction lands whole.
func TestWriteStatementsOutliveCtx(t *testing.T) {
	l, _ := openForWrites(t)
	before := tokenCounter(t, l)
	ctx, cancel := context.WithCancel(context.Background())
	err := l.write(ctx, "test", func(ctx context.Context, tx querier) error {
		cancel()
		if err := bump(ctx, tx); err != nil {
			return err
		}
		return bump(ctx, tx)
	})
	if err != nil {
		t.Fatalf("write whose context ended after BEGIN: %v", err)
	}
	if got := tokenCounter(t, l); got != before+2 {
		t.Errorf("counter %d after a transaction of two increments from %d", got, before)
	}
}

// TestWriteRollsBack: a write whose function fails, and one that wrote
// nothing, leave nothing behind and no transaction open: the next write
// lands, and another connection can take the write lock.
func TestWriteRollsBack(t *testing.T) {
	l, other := openForWrites(t)
	bg := context.Background()
	before := tokenCounter(t, l)
	failed := errors.New("failed halfway")
	if err := l.write(bg, "test", func(ctx context.Context, tx querier) error {
		if err := bump(ctx, tx); err != nil {
			return err
		}
		return failed
	}); !errors.Is(err, failed) {
		t.Fatalf("write that failed: %v, want its function's error", err)
	}
	if err := l.write(bg, "test", func(ctx context.Context, tx querier) error {
		if err := bump(ctx, tx); err != nil {
			return err
		}
		return errNothingWritten
	}); err != nil {
		t.Fatalf("write that wrote nothing: %v", err)
	}
	if got := tokenCounter(t, l); got != before {
		t.Errorf("counter %d after two rolled-back writes from %d", got, before)
	}
	ctx, cancel := context.WithTimeout(bg, 2*time.Second)
	defer cancel()
	if _, err := other.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatalf("another connection's write lock after the rolled-back writes: %v", err)
	}
	if _, err := other.ExecContext(bg, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if err := l.write(bg, "test", bump); err != nil {
		t.Fatalf("write after the rolled-back ones: %v", err)
	}
	if got := tokenCounter(t, l); got != before+1 {
		t.Errorf("counter %d after one write from %d", got, before)
	}
}

// TestWriterSwitchesRollbackConnection: a writer whose connection finds
// the ledger in rollback mode (another program switched it after open read
// the file's header) switches it to WAL before anything is written, so
// that a reader's transaction does not hold up the writer's commits: a
// write with a deadline lands while another connection reads.
func TestWriterSwitchesRollbackConnection(t *testing.T) {
	bg := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(bg, path)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var mode string
	if err := raw.QueryRow(`PRAGMA journal_mode = DELETE`).Scan(&mode); err != nil || mode != "delete" {
		t.Fatalf("journal_mode = DELETE: %q, %v", mode, err)
	}
	// open's own switch, from the header it read, is not what is tested:
	// the connection is made as open makes it, and its check runs.
	db, err := sql.Open("sqlite", dsn(path, false, false))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(bg)
	if err != nil {
		t.Fatal(err)
	}
	s := &Ledger{path: path, real: path, db: db, conn: conn, Now: time.Now, bootID: "test"}
	defer s.Close()
	if err := s.checkSchema(bg, migrations, false); err != nil {
		t.Fatalf("checkSchema: %v", err)
	}
	if err := s.conn.QueryRowContext(bg, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("the writer's journal mode after its check: %q, %v; want wal", mode, err)
	}
	reader, err := raw.Conn(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if _, err := reader.ExecContext(bg, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := reader.QueryRowContext(bg, `SELECT count(*) FROM records`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 2*time.Second)
	defer cancel()
	if err := s.write(ctx, "test", bump); err != nil {
		t.Errorf("a write while another connection reads: %v", err)
	}
	reader.ExecContext(bg, `ROLLBACK`)
}
