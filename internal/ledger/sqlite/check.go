package sqlite

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/idemhq/idem/internal/ledger"
)

// maxProblems is how many problems Check reports at most: the first few
// say what is damaged; a restore is the answer to one or to thousands.
const maxProblems = 20

// Check runs SQLite's PRAGMA integrity_check over the whole ledger, in one
// read transaction (runs go on meanwhile): every page of every table and
// index, the free list, and that each index matches its table. It reads
// the whole file: seconds for a ledger of hundreds of megabytes. A damaged
// ledger returns its result and a *StoreError that says how to recover;
// one too damaged to be read returns only the error (corrupt), or the
// problems SQLite named before it stopped, with that error.
func (s *Ledger) Check(ctx context.Context) (*ledger.CheckResult, error) {
	var r ledger.CheckResult
	if err := s.conn.QueryRowContext(ctx, `SELECT page_count FROM pragma_page_count()`).Scan(&r.Pages); err != nil {
		return nil, s.checkErr(err)
	}
	rows, err := s.conn.QueryContext(ctx, fmt.Sprintf(`PRAGMA integrity_check(%d)`, maxProblems))
	if err != nil {
		return nil, s.checkErr(err)
	}
	defer rows.Close()
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, s.checkErr(err)
		}
		if p == "ok" {
			continue
		}
		// The b-trees' problems come in one row, a line each, under a
		// heading: SQLite writes them, naming pages by number, never a
		// name from the file. Every other row is one problem, and may
		// name the file's own tables and indexes, newlines and all.
		if rest, ok := strings.CutPrefix(p, "*** in database main ***\n"); ok {
			r.Problems = append(r.Problems, strings.Split(rest, "\n")...)
			continue
		}
		r.Problems = append(r.Problems, p)
	}
	if err := rows.Err(); err != nil {
		if len(r.Problems) == 0 {
			return nil, s.checkErr(err)
		}
		// SQLite names a page it cannot read, then stops there: what it
		// named is the check's answer.
		return &r, s.checkErr(err)
	}
	if len(r.Problems) == 0 {
		p, err := s.checkRows(ctx)
		if err != nil {
			return nil, s.checkErr(err)
		}
		r.Problems = p
	}
	if len(r.Problems) > 0 {
		return &r, &ledger.StoreError{Op: "check", Path: s.path, Err: damagedErr(len(r.Problems)), Hint: checkHint}
	}
	return &r, nil
}

// checkRows finds what integrity_check cannot see in a file whose pages
// are sound: a one-row table every new run reads without its row, or a
// token counter behind a token already handed out. A ledger rebuilt from
// what could be read of a damaged one (docs/operators.md) can have either,
// and then every new key fails, or fencing tokens repeat.
func (s *Ledger) checkRows(ctx context.Context) ([]string, error) {
	tables := map[string]bool{}
	rows, err := s.conn.QueryContext(ctx, `SELECT name FROM sqlite_schema WHERE type = 'table'`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return nil, err
		}
		tables[name] = true
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	var problems []string
	// Each table's rows that runs read, and how many of them runs can
	// read: integers where they read integers (SQLite keeps any type in
	// any column, and orders a text or blob counter above every token),
	// the secret a blob, the singleton 1.
	for _, c := range []struct{ table, rows, readable string }{
		{"counters", `counters WHERE name = 'token'`, `typeof(value) = 'integer'`},
		{"token_mark", `token_mark`, `singleton = 1 AND typeof(mark) = 'integer' AND typeof(boot_id) = 'text'`},
		{"run_guard", `run_guard`, `singleton = 1 AND typeof(secret) = 'blob' AND length(secret) > 0
			AND typeof(lock_dev) = 'integer' AND typeof(lock_ino) = 'integer'`},
	} {
		if !tables[c.table] {
			continue // an older ledger's schema
		}
		var n, all int64
		if err := s.conn.QueryRowContext(ctx, `SELECT coalesce(sum(`+c.readable+`), 0), count(*) FROM `+c.rows).Scan(&n, &all); err != nil {
			return nil, err
		}
		if n != 1 || all != 1 {
			problems = append(problems, fmt.Sprintf("table %s has %d rows runs can read (of %d) where runs need 1: no new key could run", c.table, n, all))
		}
	}
	var behind int64
	if err := s.conn.QueryRowContext(ctx, `SELECT count(*) FROM counters WHERE name = 'token' AND value <
		max((SELECT coalesce(max(token), 0) FROM records), (SELECT coalesce(max(token), 0) FROM attempts))`).Scan(&behind); err != nil {
		return nil, err
	}
	if behind > 0 {
		problems = append(problems, "the token counter is behind tokens already handed out: fencing tokens would repeat")
	}
	return problems, nil
}

// checkErr is a failed check's error: a page so damaged that SQLite
// stops reading (SQLITE_CORRUPT) is the check's verdict, with its hint.
func (s *Ledger) checkErr(err error) error {
	err = s.wrap("check", err)
	var se *ledger.StoreError
	if errors.As(err, &se) && se.Hint == corruptHint {
		se.Err, se.Hint = errors.New("the database is damaged: SQLite reports it corrupt"), checkHint
	}
	return err
}

func damagedErr(n int) error {
	if n >= maxProblems {
		return fmt.Errorf("the database is damaged: the check found %d problems or more", n)
	}
	if n == 1 {
		return errors.New("the database is damaged: the check found 1 problem")
	}
	return fmt.Errorf("the database is damaged: the check found %d problems", n)
}

// checkHint is what to do with a damaged ledger (docs/operators.md has
// the steps).
const checkHint = "stop every idem that uses it, then restore it from a backup made with idem backup (remove the ledger's -wal and -shm, copy the backup over it), or salvage what is readable with sqlite3's .dump; see Damaged ledgers in docs/operators.md"
