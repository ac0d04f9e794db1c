package sqlite

import (
	"context"
	"database/sql"
	_ "embed" // schema.sql
	"errors"
	"fmt"
	"os"

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

// SchemaVersion is the ledger schema this idem writes: the number of its
// migrations.
const SchemaVersion = 4

// migrations are the schema's changes in merge order (see the ledger
// package doc); the ledger stores where it stands in PRAGMA user_version
// (see encodeVersions).
var migrations = []ledger.Migration{
	{Version: 1, Compat: 1, SQL: schemaV1},
	{Version: 2, Compat: 1, SQL: schemaV2},
	{Version: 3, Compat: 1, SQL: schemaV3},
	{Version: 4, Compat: 1, SQL: schemaV4},
}

// applicationID marks a SQLite file as an idem ledger ("idem").
const applicationID = 0x6964656d

// checkSchema refuses foreign files, and ledgers that need a newer idem,
// before anything is written; it initialises an empty file and migrates an
// older ledger, unless readOnly.
func (s *Ledger) checkSchema(ctx context.Context, migrations []ledger.Migration, readOnly bool) error {
	// One statement, so one snapshot: another idem may be initialising the
	// file right now, and separate reads could see its schema without its
	// version and call the file foreign.
	var appID, version, objects, pageSize int64
	read := func() error {
		return s.conn.QueryRowContext(ctx,
			`SELECT a.application_id, v.user_version, (SELECT count(*) FROM sqlite_schema), p.page_size
			FROM pragma_application_id() a, pragma_user_version() v, pragma_page_size() p`).
			Scan(&appID, &version, &objects, &pageSize)
	}
	err := read()
	if isReadFault(err) && ctx.Err() == nil {
		// One transient EIO reads as a damaged page: read once more
		// before the ledger is called corrupt, as writes do.
		err = read()
	}
	if err != nil {
		return storeErr("read", s.path, err)
	}
	if err := s.checkSize(pageSize); err != nil {
		return err
	}
	switch {
	case appID == applicationID && version > 0:
		pending, err := ledger.PlanSchema(decodeVersions(version), migrations, readOnly)
		if err != nil {
			return s.schemaErr(err)
		}
		if len(pending) == 0 {
			return nil
		}
		return s.migrate(ctx, "migrate", migrations)
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
const corruptHint = "restore it from a backup made with idem backup: with no idem running, remove the ledger's -wal and -shm and copy the backup over it; or move it aside to start a new one (its keys then run again)"

func notLedger(path string) error {
	return &ledger.StoreError{Op: "open", Path: path, Err: errors.New("not an idem ledger"),
		Hint: "point --ledger or IDEM_LEDGER at an idem ledger or a new file"}
}

func (s *Ledger) initialise(ctx context.Context, migrations []ledger.Migration) error {
	// Processes that open a new ledger at once all switch it to WAL. The
	// switch upgrades a read lock to a write lock within one statement, and
	// SQLite answers BUSY at once, without its busy timeout, while another
	// process holds the write lock. Wait for that lock with an empty
	// BEGIN IMMEDIATE (which does use the busy timeout), then try again:
	// by then the winner has switched the file.
	var mode string
	var err error
	for try := 0; try < busyRetries*4; try++ {
		err = s.conn.QueryRowContext(ctx, `PRAGMA journal_mode=WAL`).Scan(&mode)
		if !isBusy(err) || ctx.Err() != nil {
			break
		}
		if tx, berr := s.conn.BeginTx(ctx, nil); berr == nil {
			tx.Rollback()
		}
	}
	if err != nil {
		return storeErr("initialise", s.path, err)
	}
	if mode != "wal" {
		return &ledger.StoreError{Op: "initialise", Path: s.path, Err: fmt.Errorf("journal mode is %q, want wal", mode)}
	}
	return s.migrate(ctx, "initialise", migrations)
}

// migrate applies the migrations the ledger lacks in one BEGIN IMMEDIATE
// transaction, reading its version again under the write lock: another
// process may have initialised or migrated it first. A new file also gets
// its application_id.
func (s *Ledger) migrate(ctx context.Context, op string, migrations []ledger.Migration) error {
	var planErr error
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		var version int64
		if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
			return err
		}
		stored := decodeVersions(version)
		pending, err := ledger.PlanSchema(stored, migrations, false)
		if err != nil {
			planErr = err
			return err
		}
		if len(pending) == 0 {
			return nil // another process got here first
		}
		for _, m := range pending {
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("schema v%d: %w", m.Version, err)
			}
		}
		_, err = tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA application_id = %d; PRAGMA user_version = %d`,
			applicationID, encodeVersions(stored.After(pending))))
		return err
	})
	if planErr != nil {
		return s.schemaErr(planErr)
	}
	return err
}
