package sqlite

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// The run path's ledger work, in process, on a real SQLite file. Each
// statement is prepared per call, as in a one-shot idem process; what a
// process pays on top (start-up, open, WAL recovery, exit) is measured by
// bench/run.sh.

func benchOpen(b *testing.B) *Ledger {
	b.Helper()
	l, err := Open(context.Background(), filepath.Join(b.TempDir(), "ledger.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

func benchOwner() ledger.Owner {
	return ledger.Owner{Host: "bench", BootID: "boot", PIDNS: 1, PID: 4242, StartTime: 1}
}

func benchReserve(b *testing.B, l *Ledger, key string) *ledger.Reservation {
	b.Helper()
	r, err := l.Reserve(context.Background(), ledger.ReserveRequest{Key: key, Fingerprint: "sha256:bench",
		Command: []string{"/bin/true"}, MaxAttempts: 3, Owner: benchOwner(), Lease: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

func benchFinish(b *testing.B, l *Ledger, key string, r *ledger.Reservation, out []byte) {
	b.Helper()
	err := l.Finish(context.Background(), ledger.FinishRequest{Key: key, Token: r.Token, AttemptID: r.AttemptID,
		Status: ledger.StatusSucceeded, ExitSource: "child", Class: ledger.ClassSuccess, Duration: time.Millisecond,
		OutputStored: true, Stdout: out, Stderr: []byte{}})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkOpen opens an existing ledger (schema check included) and
// closes it (which checkpoints the WAL).
func BenchmarkOpen(b *testing.B) {
	path := benchOpen(b).path
	ctx := context.Background()
	for b.Loop() {
		l, err := Open(ctx, path)
		if err != nil {
			b.Fatal(err)
		}
		l.Close()
	}
}

// BenchmarkReserve reserves a new key: one BEGIN IMMEDIATE transaction,
// committed with synchronous=NORMAL.
func BenchmarkReserve(b *testing.B) {
	l := benchOpen(b)
	i := 0
	for b.Loop() {
		i++
		if r := benchReserve(b, l, fmt.Sprintf("bench-reserve-%d", i)); r.Outcome != ledger.Reserved {
			b.Fatalf("outcome %v", r.Outcome)
		}
	}
}

// BenchmarkRunPath is a run's three transactions: Reserve, SetChild and
// Finish (durable: synchronous=FULL). reserve=FULL shows what the
// reservation's own fsync would cost.
func BenchmarkRunPath(b *testing.B) {
	for _, full := range []bool{false, true} {
		name := "reserve=NORMAL"
		if full {
			name = "reserve=FULL"
		}
		b.Run(name, func(b *testing.B) {
			l := benchOpen(b)
			ctx := context.Background()
			out := bytes.Repeat([]byte("x"), 100)
			i := 0
			for b.Loop() {
				i++
				key := fmt.Sprintf("bench-run-%d", i)
				if full {
					// The connection at FULL, while l believes it at NORMAL:
					// writes switch the level only when it differs from what
					// they need, so Reserve and SetChild commit at FULL too.
					if _, err := l.conn.ExecContext(ctx, `PRAGMA synchronous = FULL`); err != nil {
						b.Fatal(err)
					}
					l.full = false
				}
				r := benchReserve(b, l, key)
				if err := l.SetChild(ctx, key, r.Token, 4243, 2); err != nil {
					b.Fatal(err)
				}
				benchFinish(b, l, key, r, out)
			}
		})
	}
}

// BenchmarkFinish records outcomes of 10 KB (durable commit, one fsync).
func BenchmarkFinish(b *testing.B) {
	l := benchOpen(b)
	out := bytes.Repeat([]byte("y"), 10<<10)
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		key := fmt.Sprintf("bench-finish-%d", i)
		r := benchReserve(b, l, key)
		b.StartTimer()
		benchFinish(b, l, key, r, out)
	}
}

// BenchmarkReplay replays a recorded 10 KB output from ledgers of
// different sizes: the lookup is by the key's index, so it stays flat.
func BenchmarkReplay(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			l := benchOpen(b)
			benchFill(b, l, n)
			const key = "bench-replay-10k"
			benchFinish(b, l, key, benchReserve(b, l, key), bytes.Repeat([]byte("z"), 10<<10))
			b.SetBytes(10 << 10)
			for b.Loop() {
				r := benchReserve(b, l, key)
				if r.Outcome != ledger.Replay || len(r.Record.Stdout) != 10<<10 {
					b.Fatalf("outcome %v, %d bytes", r.Outcome, len(r.Record.Stdout))
				}
			}
		})
	}
}

// benchFill adds n finished records in one transaction.
func benchFill(b *testing.B, l *Ledger, n int) {
	b.Helper()
	ctx := context.Background()
	now := time.Now().UnixMilli()
	_, err := l.conn.ExecContext(ctx, `WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?)
		INSERT INTO records (key, fingerprint, command, status, attempts, max_attempts, exit_code, token,
			created_ms, started_ms, updated_ms, finished_ms, stdout, stderr)
		SELECT printf('fill-%08d', i), 'sha256:fill', '["true"]', 'succeeded', 1, 3, 0, -i, ?, ?, ?, ?, randomblob(100), x''
		FROM s`, n, now, now, now, now)
	if err != nil {
		b.Fatal(err)
	}
}
