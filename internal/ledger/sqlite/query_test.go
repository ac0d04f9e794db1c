package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/ledgertest"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

// openQueryLedger opens a fresh SQLite ledger in t.TempDir.
func openQueryLedger(t *testing.T, now func() time.Time) *sqlite.Ledger {
	t.Helper()
	l := openSQLite(t, filepath.Join(t.TempDir(), "ledger.db"))
	if now != nil {
		l.Now = now
	}
	return l
}

func TestQueryConformanceSQLite(t *testing.T) {
	ledgertest.RunQuery(t, func(t *testing.T, now func() time.Time) ledger.Ledger {
		return openQueryLedger(t, now)
	})
}

// seed inserts n finished records straight into the ledger file, one
// attempt each, in one transaction: key i finishes at outcome(i).
func seed(t testing.TB, path string, n int, outcome func(i int) time.Time) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	rec, err := tx.Prepare(`INSERT INTO records (key, fingerprint, command, status, attempts, max_attempts, exit_code, token,
		created_ms, started_ms, updated_ms, finished_ms, duration_ms, stdout, stderr)
		VALUES (?, 'fp', '["seed"]', 'succeeded', 1, 3, 0, ?, ?, ?, ?, ?, 5, ?, x'')`)
	if err != nil {
		t.Fatal(err)
	}
	att, err := tx.Prepare(`INSERT INTO attempts (key, n, token, started_ms, ended_ms, exit_code, class)
		VALUES (?, 1, ?, ?, ?, 0, 'success')`)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 100)
	for i := range n {
		k := fmt.Sprintf("seed:%07d", i)
		ms := outcome(i).UnixMilli()
		if _, err := rec.Exec(k, i+1, ms-5, ms-5, ms, ms, out); err != nil {
			t.Fatal(err)
		}
		if _, err := att.Exec(k, i+1, ms-5, ms); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(`UPDATE counters SET value = ? WHERE name = 'token'`, n); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func count(t testing.TB, path, q string, args ...any) int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPurgeLargeWhileRunning fills a ledger with 200,000 records (10,000
// under -race), half of them 40 days old, and purges those older than 30 days while a second
// connection (another idem, in effect) reserves and finishes keys in a
// loop. The purge must remove exactly the old records and their attempts,
// and every concurrent run must complete. The longest wait of one
// concurrent Reserve+Finish is logged (run with -v); it is not asserted.
func TestPurgeLargeWhileRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a ledger with 200,000 records")
	}
	n := 200_000
	if raceDetector {
		n = 10_000 // the race detector checks the code, not the numbers
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l := openSQLite(t, path)
	now := time.Now()
	old := func(i int) bool { return i%2 == 0 }
	began := time.Now()
	seed(t, path, n, func(i int) time.Time {
		if old(i) {
			return now.Add(-40 * 24 * time.Hour).Add(time.Duration(i) * time.Millisecond)
		}
		return now.Add(-time.Duration(i) * time.Second) // within the last 3 days
	})
	t.Logf("seeded %d records in %v", n, time.Since(began).Round(time.Millisecond))

	other := openSQLite(t, path)
	var (
		wg        sync.WaitGroup
		stop      = make(chan struct{})
		runs      int
		longest   time.Duration
		waits     []time.Duration
		runErr    error
		concurKey = func(i int) string { return fmt.Sprintf("live:run:%06d", i) }
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		owner := ledger.Owner{Host: "test", PID: 1}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			res, err := other.Reserve(ctx, ledger.ReserveRequest{Key: concurKey(i), Fingerprint: "fp", Command: []string{"x"},
				MaxAttempts: 1, Owner: owner, Lease: 30 * time.Second})
			if err == nil && res.Outcome != ledger.Reserved {
				err = fmt.Errorf("reserve %s: outcome %d", concurKey(i), res.Outcome)
			}
			if err == nil {
				err = other.Finish(ctx, ledger.FinishRequest{Key: concurKey(i), Token: res.Token, AttemptID: res.AttemptID,
					Status: ledger.StatusSucceeded, ExitSource: "child", Class: ledger.ClassSuccess, OutputStored: true,
					Stdout: []byte("ok")})
			}
			d := time.Since(t0)
			if err != nil {
				runErr = err
				return
			}
			runs++
			waits = append(waits, d)
			longest = max(longest, d)
			time.Sleep(2 * time.Millisecond) // a busy host, not a tight loop: the purge gets the lock too
		}
	}()

	began = time.Now()
	res, err := l.Purge(ctx, ledger.PurgeRequest{Selector: ledger.Selector{OlderThan: 30 * 24 * time.Hour}})
	took := time.Since(began)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if runErr != nil {
		t.Fatalf("concurrent run failed: %v", runErr)
	}
	if res.Removed != n/2 {
		t.Errorf("removed %d, want %d", res.Removed, n/2)
	}
	if got := count(t, path, `SELECT count(*) FROM records WHERE key GLOB 'seed:*'`); got != n/2 {
		t.Errorf("%d seeded records left, want %d", got, n/2)
	}
	if got := count(t, path, `SELECT count(*) FROM records WHERE key GLOB 'seed:*' AND finished_ms < ?`,
		now.Add(-30*24*time.Hour).UnixMilli()); got != 0 {
		t.Errorf("%d old records left", got)
	}
	if got := count(t, path, `SELECT count(*) FROM attempts WHERE key NOT IN (SELECT key FROM records)`); got != 0 {
		t.Errorf("%d attempts of purged records left", got)
	}
	if got := count(t, path, `SELECT count(*) FROM records WHERE key GLOB 'live:run:*' AND status = 'succeeded'`); got != runs {
		t.Errorf("%d concurrent runs recorded, want %d", got, runs)
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	p := func(q float64) time.Duration {
		if len(waits) == 0 {
			return 0
		}
		return waits[int(q*float64(len(waits)-1))]
	}
	t.Logf("purged %d of %d records in %v; %d concurrent Reserve+Finish completed meanwhile: median %v, p99 %v, longest %v",
		res.Removed, n, took.Round(time.Millisecond), runs, p(0.5).Round(time.Microsecond), p(0.99).Round(time.Microsecond),
		longest.Round(time.Microsecond))
	if runs == 0 {
		t.Errorf("no concurrent run completed during the purge")
	}

	v, err := l.Vacuum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("vacuum: %d -> %d bytes", v.Before, v.After)
	if v.After >= v.Before {
		t.Errorf("vacuum after purging half the records: %d -> %d bytes", v.Before, v.After)
	}
}

// TestPurgeCancelled stops between chunks when the context ends and keeps
// what it removed so far consistent.
func TestPurgeCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	path := filepath.Join(t.TempDir(), "ledger.db")
	l := openSQLite(t, path)
	now := time.Now()
	seed(t, path, 100, func(i int) time.Time { return now.Add(-time.Hour) })
	cancel()
	_, err := l.Purge(ctx, ledger.PurgeRequest{Selector: ledger.Selector{All: true}, Chunk: 10})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Purge with a cancelled context: %v, want context.Canceled", err)
	}
	if got := count(t, path, `SELECT count(*) FROM attempts WHERE key NOT IN (SELECT key FROM records)`); got != 0 {
		t.Errorf("%d orphaned attempts", got)
	}
}
