// Command floor is the least a run can do with idem's durability and
// dependencies, for comparison with idem run: open the SQLite ledger, insert
// a reservation in a BEGIN IMMEDIATE transaction (synchronous=NORMAL), run
// the command, record its exit code with synchronous=FULL, and exit without
// closing (truncating the WAL past 256 KiB, as idem does). It links the same
// drivers (modernc SQLite and pgx) and cobra, so its start-up is idem's
// minus idem's own code. Built with -tags phases, it marks the points that
// idem run marks too (internal/probe), for bench/run.sh's breakdown.
//
//	floor LEDGER KEY CMD [ARG...]   (a LEDGER of its own: the schema is one table)
//	floor --pg DSN                  (links pgx in: connects and exits)
package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/idemhq/idem/internal/probe"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	_ "modernc.org/sqlite"
)

func main() {
	probe.At("main")
	var dsn string
	root := &cobra.Command{
		Use:           "floor LEDGER KEY CMD [ARG...]",
		Args:          cobra.ArbitraryArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(c *cobra.Command, args []string) error {
			if dsn != "" {
				return connect(c.Context(), dsn)
			}
			if len(args) < 3 {
				return fmt.Errorf("usage: %s", c.Use)
			}
			return run(c.Context(), args)
		},
	}
	root.Flags().SetInterspersed(false)
	root.Flags().StringVar(&dsn, "pg", "", "connect to this PostgreSQL DSN and exit")
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	probe.Exit()
}

func connect(ctx context.Context, dsn string) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

func run(ctx context.Context, args []string) error {
	path, key, argv := args[0], args[1], args[2:]
	path, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	u := url.URL{Scheme: "file", Path: path, RawQuery: "_pragma=busy_timeout(5000)&_pragma=synchronous(NORMAL)&_txlock=immediate"}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	var mode string
	if err := conn.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS runs (key TEXT PRIMARY KEY, code INTEGER)`); err != nil {
		return err
	}
	probe.At("opened")
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO runs (key) VALUES (?)`, key); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	probe.At("after-reserve")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	probe.At("after-child-start")
	cmd.Wait()
	probe.At("after-child-exit")
	if _, err := conn.ExecContext(ctx, `PRAGMA synchronous = FULL`); err != nil {
		return err
	}
	tx, err = conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE runs SET code = ? WHERE key = ?`, cmd.ProcessState.ExitCode(), key); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() >= 256<<10 {
		conn.ExecContext(ctx, `PRAGMA busy_timeout = 0`)
		conn.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
	}
	probe.At("after-finish")
	return nil
}
