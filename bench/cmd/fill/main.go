// Command fill creates an idem ledger holding n finished records (and one
// attempt each), for benchmarks that need a big ledger. It creates the file
// through the ledger package, so the schema is the real one, then inserts
// every row with one INSERT ... SELECT in one transaction.
//
//	fill -n 1000000 [-expired] [-output 100] LEDGER
//
// Records are keyed fill-00000001 ... and succeeded an hour ago; with
// -expired their TTL has run out (purge --expired removes them all).
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/idemhq/idem/internal/ledger/sqlite"
)

func main() {
	n := flag.Int("n", 1000, "records to insert")
	expired := flag.Bool("expired", false, "records whose TTL has run out")
	output := flag.Int("output", 100, "bytes of stdout per record")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: fill [-n N] [-expired] [-output BYTES] LEDGER")
		os.Exit(2)
	}
	if err := fill(flag.Arg(0), *n, *expired, *output); err != nil {
		fmt.Fprintln(os.Stderr, "fill:", err)
		os.Exit(1)
	}
}

func fill(path string, n int, expired bool, output int) error {
	ctx := context.Background()
	start := time.Now()
	l, err := sqlite.Open(ctx, path)
	if err != nil {
		return err
	}
	abs := l.Describe()
	if err := l.Close(); err != nil {
		return err
	}
	u := url.URL{Scheme: "file", Path: abs, RawQuery: "_pragma=busy_timeout(5000)&_txlock=immediate"}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var base int64
	if err := tx.QueryRowContext(ctx, `SELECT value FROM counters WHERE name = 'token'`).Scan(&base); err != nil {
		return err
	}
	now := time.Now().UnixMilli()
	finished := now - 3600_000
	ttl, expires := int64(0), sql.NullInt64{}
	if expired {
		ttl, expires = 60_000, sql.NullInt64{Int64: finished + 60_000, Valid: true}
	}
	// One statement per table: SQLite generates the rows itself.
	const series = `WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?) `
	if _, err := tx.ExecContext(ctx, series+`
		INSERT INTO records (key, fingerprint, command, status, attempts, max_attempts, exit_code, exit_source, token,
			owner_host, owner_pid, created_ms, started_ms, updated_ms, finished_ms, duration_ms, ttl_ms, expires_ms,
			output_stored, stdout, stderr)
		SELECT printf('fill-%08d', i), 'sha256:fill', '["true"]', 'succeeded', 1, 3, 0, 'child', ? + i,
			'bench', 1, ?, ?, ?, ?, 5, ?, ?, 1, randomblob(?), x''
		FROM s`, n, base, finished, finished, finished, finished, ttl, expires, output); err != nil {
		return fmt.Errorf("insert records: %w", err)
	}
	if _, err := tx.ExecContext(ctx, series+`
		INSERT INTO attempts (key, n, token, host, pid, started_ms, ended_ms, exit_code, class)
		SELECT printf('fill-%08d', i), 1, ? + i, 'bench', 1, ?, ?, 0, 'success' FROM s`,
		n, base, finished, finished); err != nil {
		return fmt.Errorf("insert attempts: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE counters SET value = value + ? WHERE name = 'token'`, n); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	fmt.Printf("fill: %d records in %s (%.1fs)\n", n, abs, time.Since(start).Seconds())
	return nil
}
