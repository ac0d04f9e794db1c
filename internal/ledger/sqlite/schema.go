package sqlite

import (
	"context"
	_ "embed" // schema.sql
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/idemhq/idem/internal/ledger"
)

//go:embed schema.sql
var schemaV1 string

//go:embed schema_v2.sql
var schemaV2 string

//go:embed schema_v3.sql
var schemaV3 string

//go:embed schema_v4.sql
var schemaV4 string

//go:embed schema_v5.sql
var schemaV5 string

//go:embed schema_v6.sql
var schemaV6 string

// SchemaVersion is the ledger schema this idem writes: the number of its
// migrations.
const SchemaVersion = 6

// migrations are the schema's changes in merge order (see the ledger
// package doc); the ledger stores where it stands in PRAGMA user_version
// (see encodeVersions).
var migrations = []ledger.Migration{
	{Version: 1, Compat: 1, SQL: schemaV1},
	{Version: 2, Compat: 1, SQL: schemaV2},
	{Version: 3, Compat: 1, SQL: schemaV3},
	{Version: 4, Compat: 4, SQL: schemaV4},
	{Version: 5, Compat: 4, SQL: schemaV5},
	{Version: 6, Compat: 4, SQL: schemaV6},
}

// checkSchema refuses foreign files, and ledgers that need a newer idem,
// before anything is written; it initialises an empty file and migrates an
// older ledger, unless readOnly.
func (s *Ledger) checkSchema(ctx context.Context, migrations []ledger.Migration, readOnly bool) error {
	// Every page read from here on has its cells checked too, so that a
	// damaged page is refused as corrupt rather than misread.
	if _, err := s.conn.ExecContext(ctx, `PRAGMA cell_size_check = ON`); err != nil {
		return storeErr("open", s.path, err)
	}
	var appID, version, objects, pageSize int64
	var mode string
	head := []any{&appID, &version, &objects, &pageSize, &mode}
	// A writer first reads the head and checks the pages (see
	// checkPages) in one statement: a statement fewer for a ledger that
	// is sound and current, as every run's and replay's is. A statement
	// that fails (another file, an older schema, a damaged page) or a
	// problem found takes the two reads below, as if this one had not
	// been; a ledger it migrates has its pages checked again after.
	var pc pageChecks
	checked := !readOnly && s.conn.QueryRowContext(ctx, headSQL+`, `+pageCheckColumns+headFrom).
		Scan(append(head, pc.dest()...)...) == nil && pc.problem() == ""
	var err error
	if !checked {
		read := func() error { return s.conn.QueryRowContext(ctx, headSQL+headFrom).Scan(head...) }
		err = read()
		if isReadFault(err) && ctx.Err() == nil {
			// One transient EIO reads as a damaged page: read once more
			// before the ledger is called corrupt, as writes do.
			err = read()
		}
	}
	if err != nil {
		return storeErr("read", s.path, err)
	}
	if err := s.checkSize(pageSize); err != nil {
		return err
	}
	switch {
	case isIdemID(uint32(appID)) && version > 0:
		s.setID(uint32(appID))
		if !readOnly && mode != "wal" {
			// A restored backup (VACUUM INTO writes rollback mode), or a
			// file another program switched (a journal_mode=DELETE, a
			// backup copied over it while idem opened it): without WAL,
			// a reader's open transaction would block every run's
			// commit. Switch before anything is written.
			if err := s.switchToWAL(ctx, "open"); err != nil {
				return err
			}
		}
		pending, err := ledger.PlanSchema(decodeVersions(version), migrations, readOnly)
		if err != nil {
			return s.schemaErr(err)
		}
		if len(pending) > 0 {
			if err := s.migrate(ctx, "migrate", migrations); err != nil {
				return err
			}
		}
		if readOnly {
			return nil
		}
		if !checked || len(pending) > 0 {
			if err := s.checkPages(ctx); err != nil {
				return err
			}
		}
		if s.id == legacyApplicationID {
			return s.migrate(ctx, "give the ledger an identity", migrations)
		}
		return nil
	case appID != 0 || version != 0:
		return notLedger(s.path)
	}
	if objects > 0 {
		return notLedger(s.path)
	}
	if readOnly {
		return noLedger(s.path)
	}
	return s.initialise(ctx, migrations)
}

// decodeVersions reads PRAGMA user_version: below 1<<16 it is one number,
// the write and compatibility version alike (every ledger whose versions
// have not parted, v1 included); from 1<<16 on, the write version is its
// high 16 bits and the compatibility version its low 16 bits.
func decodeVersions(uv int64) ledger.SchemaVersions {
	if uv < 1<<16 {
		return ledger.SchemaVersions{Write: int(uv), Compat: int(uv)}
	}
	return ledger.SchemaVersions{Write: int(uv >> 16), Compat: int(uv & 0xffff)}
}

// encodeVersions is the user_version that decodeVersions reads as v.
func encodeVersions(v ledger.SchemaVersions) int64 {
	if v.Compat == 0 || v.Compat == v.Write {
		return int64(v.Write)
	}
	return int64(v.Write)<<16 | int64(v.Compat)
}

// schemaErr puts ledger.PlanSchema's errors in a *StoreError.
func (s *Ledger) schemaErr(err error) error {
	return ledger.PlanError(err, s.path, noLedgerHint, "upgrade idem, or point --ledger at another file")
}

// checkSize refuses a file cut inside a page: SQLite reads the missing
// tail of the last page as zeros and would go on, and write, on a
// damaged file. (A cut at a page boundary it reports as corrupt itself.)
func (s *Ledger) checkSize(pageSize int64) error {
	fi, err := os.Stat(s.path)
	if err != nil {
		return storeErr("read", s.path, err)
	}
	if pageSize > 0 && fi.Size()%pageSize != 0 {
		return &ledger.StoreError{Op: "open", Path: s.path,
			Err:  fmt.Errorf("the database is corrupt: %d bytes is not a whole number of %d-byte pages (truncated?)", fi.Size(), pageSize),
			Hint: corruptHint}
	}
	return nil
}

// corruptHint says how to restore a ledger (see 'idem backup --help').
const corruptHint = "see idem check; restore it from a backup made with idem backup: with no idem running, remove the ledger's -wal and -shm and copy the backup over it; or move it aside to start a new one (its keys then run again)"

// headSQL and headFrom read the ledger's head: its identity, schema
// version, number of schema objects, page size and the connection's
// journal mode, in one statement, so one snapshot: another idem may be
// initialising the file right now, and separate reads could see its
// schema without its version and call the file foreign.
const (
	headSQL  = `SELECT a.application_id, v.user_version, (SELECT count(*) FROM sqlite_schema), p.page_size, j.journal_mode`
	headFrom = ` FROM pragma_application_id() a, pragma_user_version() v, pragma_page_size() p, pragma_journal_mode() j`
)

// pageCheckColumns read what every run and replay of the ledger depends
// on beyond its own record: the one-page tables (the token counter and
// mark, the totals, the run guard's secret), checked whole, and the root
// and rightmost path of every other b-tree, which SQLite checks as it
// reads them (with cell_size_check): the pages where rows in rowid or
// time order go (a new record, its attempt, a succeeded outcome). It
// costs a few dozen page reads whatever the ledger's size, most of them
// pages the run reads next anyway. The rest of a large table is checked
// as a run reads it (its key's path in records, and in outputs, see
// readOutputPath), and whole by idem check.
const pageCheckColumns = `
	(SELECT group_concat(quick_check, '; ') FROM pragma_quick_check('counters')),
	(SELECT group_concat(quick_check, '; ') FROM pragma_quick_check('token_mark')),
	(SELECT group_concat(quick_check, '; ') FROM pragma_quick_check('totals')),
	(SELECT group_concat(quick_check, '; ') FROM pragma_quick_check('run_guard')),
	(SELECT max(rowid) FROM records), (SELECT max(key) FROM records),
	(SELECT max(coalesce(finished_ms, created_ms)) FROM records), (SELECT max(status) FROM records),
	(SELECT max(expires_ms) FROM records WHERE expires_ms IS NOT NULL),
	(SELECT max(id) FROM attempts), (SELECT max(key) FROM attempts),
	(SELECT max(rowid) FROM outputs), (SELECT max(key) FROM outputs),
	(SELECT max(grp) FROM last_success)`

// pageChecks receives pageCheckColumns: quick_check's answers for the
// tables checked whole, and the values read from the others, which only
// the reading checks.
type pageChecks struct {
	whole [4]string
	read  [10]any
}

func (p *pageChecks) dest() []any {
	d := make([]any, 0, len(p.whole)+len(p.read))
	for i := range p.whole {
		d = append(d, &p.whole[i])
	}
	for i := range p.read {
		d = append(d, &p.read[i])
	}
	return d
}

// problem is what quick_check found in the first table it did not call
// ok, with that table's name; "" when every one is.
func (p *pageChecks) problem() string {
	tables := [len(p.whole)]string{"counters", "token_mark", "totals", "run_guard"}
	for i, c := range p.whole {
		if c != "ok" {
			return "table " + tables[i] + ": " + strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(c, "*** in database main ***", ""), "\n", " "))
		}
	}
	return ""
}

// checkPages refuses, before anything is written, a ledger whose pages
// that every run depends on are damaged (see pageCheckColumns): SQLite
// reports a damaged page only when it reads it, and a run writes to pages
// it has not read (the totals) or reads only after its command ran (the
// outcome's index entries).
func (s *Ledger) checkPages(ctx context.Context) error {
	var pc pageChecks
	read := func() error { return s.conn.QueryRowContext(ctx, `SELECT `+pageCheckColumns).Scan(pc.dest()...) }
	err := read()
	if (isReadFault(err) || err == nil && pc.problem() != "") && ctx.Err() == nil {
		// One transient EIO reads as a damaged page (quick_check reports
		// it as a problem): read once more before calling it corrupt.
		err = read()
	}
	if err != nil {
		return storeErr("open", s.path, err)
	}
	if problem := pc.problem(); problem != "" {
		return &ledger.StoreError{Op: "open", Path: s.path,
			Err: fmt.Errorf("the database is corrupt (%s)", problem), Hint: corruptHint}
	}
	return nil
}

func notLedger(path string) error {
	return &ledger.StoreError{Op: "open", Path: path, Err: errors.New("not an idem ledger"),
		Hint: "point --ledger or IDEM_LEDGER at an idem ledger or a new file"}
}

func (s *Ledger) initialise(ctx context.Context, migrations []ledger.Migration) error {
	if err := s.switchToWAL(ctx, "initialise"); err != nil {
		return err
	}
	return s.migrate(ctx, "initialise", migrations)
}

// migrate applies the migrations the ledger lacks in one BEGIN IMMEDIATE
// transaction, reading its version and identity again under the write
// lock: another process may have initialised or migrated it first. A new
// file, and a ledger made before ledgers had identities of their own, get
// one (see walid.go); the ledger then checkpoints, so that its main file,
// not only its -wal, carries it soon (until then, checkJournal takes an
// idem identity beside a main file that has none yet).
func (s *Ledger) migrate(ctx context.Context, op string, migrations []ledger.Migration) error {
	var planErr error
	rekeyed := false
	err := s.write(ctx, op, func(ctx context.Context, tx querier) error {
		rekeyed = false
		var version, appID int64
		if err := tx.QueryRowContext(ctx, `SELECT v.user_version, a.application_id FROM pragma_user_version() v, pragma_application_id() a`).
			Scan(&version, &appID); err != nil {
			return err
		}
		stored := decodeVersions(version)
		pending, err := ledger.PlanSchema(stored, migrations, false)
		if err != nil {
			planErr = err
			return err
		}
		id := uint32(appID)
		if !isIdemID(id) || id == legacyApplicationID {
			id, rekeyed = newLedgerID(), true
		}
		if len(pending) == 0 && !rekeyed {
			s.setID(id)
			return nil // another process got here first
		}
		for _, m := range pending {
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("schema v%d: %w", m.Version, err)
			}
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, encodeVersions(stored.After(pending)))); err != nil {
			return err
		}
		s.setID(id) // the stamp of this transaction sets it
		return nil
	})
	if planErr != nil {
		return s.schemaErr(planErr)
	}
	if err == nil && rekeyed {
		// Opportunistic, as trimWAL: a reader keeps it from completing,
		// and the next checkpoint does it.
		s.conn.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`)
	}
	return err
}
