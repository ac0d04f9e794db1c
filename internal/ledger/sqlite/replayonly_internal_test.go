package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// TestReplayOnlyConnection: the connection open falls back to when SQLite
// cannot make the -shm (exclusive locking mode) uses no -shm and holds
// every other process off the ledger until it closes. It serves a replay,
// closing before the replay's output is written, and refuses a fresh key
// and a busy one with the reason it was made, writing nothing: a run's
// command or a wait must not hold the ledger.
func TestReplayOnlyConnection(t *testing.T) {
	ctx := context.Background()
	l, path := newLedger(t)
	req := func(key string) ledger.ReserveRequest {
		return ledger.ReserveRequest{Key: key, Fingerprint: "fp", Command: []string{"true"}, MaxAttempts: 3,
			Owner: ledger.Owner{Host: "h", PID: os.Getpid()}, Lease: time.Minute}
	}
	res, err := l.Reserve(ctx, req("evt:done"))
	if err != nil || res.Outcome != ledger.Reserved {
		t.Fatalf("reserve evt:done: %+v, %v", res, err)
	}
	if err := l.Finish(ctx, ledger.FinishRequest{Key: "evt:done", Token: res.Token, AttemptID: res.AttemptID,
		Status: ledger.StatusSucceeded, ExitSource: "child", Class: ledger.ClassSuccess, OutputStored: true,
		Stdout: []byte("hello\n")}); err != nil {
		t.Fatal(err)
	}
	if res, err := l.Reserve(ctx, req("evt:busy")); err != nil || res.Outcome != ledger.Reserved {
		t.Fatalf("reserve evt:busy: %+v, %v", res, err)
	}
	l.Close() // the last connection: SQLite deletes the -wal and the -shm

	why := errors.New("the -shm could not be made")
	replayOnly := func() *Ledger {
		t.Helper()
		r := &Ledger{path: path, real: path, Now: time.Now, bootID: "test", replayOnly: why}
		if err := r.connect(ctx, dsn(path, false, true), migrations, false); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	r := replayOnly()
	if _, err := os.Stat(path + "-shm"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the replay-only connection's -shm: %v; want none", err)
	}
	// Another process: its connection closes after each read, as it
	// would otherwise hold the ledger's shared lock.
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.SetMaxIdleConns(0)
	var n int
	if err := other.QueryRow(`SELECT count(*) FROM records`).Scan(&n); !isBusy(err) {
		t.Errorf("another connection's read while a replay-only one is open: %v; want SQLITE_BUSY", err)
	}
	res, err = r.Reserve(ctx, req("evt:done"))
	if err != nil || res.Outcome != ledger.Replay || string(res.Record.Stdout) != "hello\n" || res.Record.Replays != 1 {
		t.Fatalf("replay on the replay-only connection: %+v, %v; want the replay, counted", res, err)
	}
	// Before its output is written, the replay lets the ledger go.
	if err := other.QueryRow(`SELECT count(*) FROM records`).Scan(&n); err != nil {
		t.Errorf("another connection's read once the replay is read: %v", err)
	}
	for _, key := range []string{"evt:fresh", "evt:busy"} {
		if res, err := replayOnly().Reserve(ctx, req(key)); !errors.Is(err, why) {
			t.Errorf("reserve %s on the replay-only connection: %+v, %v; want %v", key, res, err, why)
		}
	}
	// Locked all along, as by a process that maps a -shm since deleted:
	// after the busy timeout, the error is the -shm's, not the lock's.
	tx, err := other.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(`SELECT count(*) FROM records`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	locked := &Ledger{path: path, real: path, Now: time.Now, bootID: "test", replayOnly: why}
	if err := locked.connectExclusive(ctx, migrations); !errors.Is(err, why) {
		t.Errorf("a replay-only connection to a ledger locked all along: %v; want %v", err, why)
	}
	tx.Rollback()
	var replays int64
	if err := other.QueryRow(`SELECT count(*), sum(replays) FROM records`).Scan(&n, &replays); err != nil || n != 2 || replays != 1 {
		t.Errorf("after the replay-only connections: %d records, %d replays, %v; want 2 and 1 (nothing but the replay's count written)", n, replays, err)
	}
}
