// Package sqlite is the single-host backend of the ledger contract: one
// SQLite file (modernc.org/sqlite, no cgo) in WAL mode, one connection per
// process, every write a short BEGIN IMMEDIATE transaction. Reservations
// commit at synchronous=NORMAL and outcomes at FULL. Errors are the
// contract's: driver errors become *ledger.StoreError with a hint.
package sqlite

import (
	"context"
	"database/sql"
	_ "embed" // schema.sql
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	msqlite "modernc.org/sqlite"

	"github.com/idemhq/idem/internal/ledger"
)

//go:embed schema.sql
var schemaV1 string

//go:embed schema_v2.sql
var schemaV2 string

//go:embed schema_v3.sql
var schemaV3 string

// SchemaVersion is the ledger schema this idem writes: the number of its
// migrations.
const SchemaVersion = 3

// migrations are the schema's changes in merge order (see the ledger
// package doc); the ledger stores where it stands in PRAGMA user_version
// (see encodeVersions).
var migrations = []ledger.Migration{
	{Version: 1, Compat: 1, SQL: schemaV1},
	{Version: 2, Compat: 1, SQL: schemaV2},
	{Version: 3, Compat: 1, SQL: schemaV3},
}

// applicationID marks a SQLite file as an idem ledger ("idem").
const applicationID = 0x6964656d

// busyTimeout is how long SQLite itself waits for the write lock; busyRetries
// bounds our retries around it (WAL recovery can return BUSY at once).
const (
	busyTimeout = 5000 // ms
	busyRetries = 4
)

// walTruncateAt is the WAL size past which the end of a run checkpoints the
// WAL and truncates it (see trimWAL). It is also the journal_size_limit:
// the WAL file is cut back to it when SQLite restarts it.
const walTruncateAt = 256 << 10 // bytes: ~64 pages of 4 KiB

var _ ledger.Ledger = (*Ledger)(nil)

// Ledger is the single-host ledger: one file, WAL mode, one connection.
type Ledger struct {
	path string
	db   *sql.DB
	conn *sql.Conn
	// mu orders writes, and with them full: whether the connection's
	// synchronous level is FULL (an outcome was the last write) or NORMAL.
	mu   sync.Mutex
	full bool
	// bootID names the boot this process runs in, for the token mark:
	// the caller's (ReserveRequest.Owner.BootID), or, where that is
	// unknown, one made up for this process, so that each process then
	// counts as a new boot (its first reservation jumps past the mark).
	bootID string
	// real is the file SQLite opened (a link's target); mainID and walID
	// the identity of it and its -wal when opened (see checkFiles).
	real          string
	mainID, walID fileID
	// Now is the clock; tests replace it.
	Now func() time.Time
	// Tightened names the ledger files whose group and other permissions
	// Open took away (the ledger holds command output); callers warn.
	Tightened []string
}

// Open opens (creating when missing) the ledger at path to read and
// write. A missing parent directory is created 0700 and a missing file
// 0600. A file that is not an idem ledger, or one whose schema needs a
// newer idem, is refused untouched; an older one is migrated. Every error
// is a *StoreError.
func Open(ctx context.Context, path string) (*Ledger, error) {
	return open(ctx, path, ledger.Options{}, migrations)
}

// OpenWith opens the ledger at path as opts says: with opts.ReadOnly, an
// existing ledger is opened for reading only (the file needs only read
// permission; nothing is created, initialised, migrated or tightened) and
// a missing or empty file is a *StoreError wrapping ledger.ErrNoLedger.
// Every error is a *StoreError.
func OpenWith(ctx context.Context, path string, opts ledger.Options) (*Ledger, error) {
	return open(ctx, path, opts, migrations)
}

// open is OpenWith for a given list of migrations (tests give it more).
func open(ctx context.Context, path string, opts ledger.Options, migrations []ledger.Migration) (*Ledger, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, &ledger.StoreError{Op: "open", Path: path, Err: err}
	}
	var real string
	if opts.ReadOnly {
		real, err = checkFile(abs)
	} else {
		real, err = prepareFile(abs, !opts.NoMkdir)
	}
	if err != nil {
		return nil, err
	}
	if err := checkWAL(abs, real); err != nil {
		return nil, err
	}
	d := dsn(abs, opts.ReadOnly)
	if opts.ReadOnly {
		// A reader may not be able to create -wal and -shm (a directory it
		// cannot write), and must not leave them behind as another user.
		// Without a -wal, every commit is in the file itself, so it is
		// read as immutable: SQLite then opens no other file. (A writer
		// that starts meanwhile and checkpoints into the file could tear
		// a read; the reader changes nothing, so at worst it fails.) With
		// a -wal, SQLite reads it through the -shm as any reader does.
		if _, err := os.Stat(real + "-wal"); errors.Is(err, fs.ErrNotExist) {
			d += "&immutable=1"
		}
	}
	db, err := sql.Open("sqlite", d)
	if err != nil {
		return nil, &ledger.StoreError{Op: "open", Path: abs, Err: err}
	}
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if isReadFault(err) && ctx.Err() == nil {
		// The connection's pragmas read the file: one transient EIO reads
		// as a damaged page, so connect once more before calling it corrupt.
		conn, err = db.Conn(ctx)
	}
	if err != nil {
		db.Close()
		return nil, storeErr("open", abs, err)
	}
	s := &Ledger{path: abs, db: db, conn: conn, Now: time.Now, bootID: fmt.Sprintf("process:%d:%x", os.Getpid(), rand.Uint64())}
	err = s.checkSchema(ctx, migrations, opts.ReadOnly)
	if err != nil {
		s.Close()
		return nil, err
	}
	if opts.ReadOnly {
		return s, nil
	}
	// Only a file known to be an idem ledger has its modes changed.
	if s.Tightened, err = tighten(real); err != nil {
		s.Close()
		return nil, err
	}
	s.bindWAL(real)
	s.noteFiles(real)
	return s, nil
}

// dsn builds a file: URI for modernc: the path percent-escaped so that no
// user text can add URI or _pragma parameters, then our fixed parameters.
// Reservations commit with synchronous=NORMAL; Finish switches to FULL.
// A read-only ledger is opened with mode=ro: SQLite itself refuses writes.
func dsn(abs string, readOnly bool) string {
	var b strings.Builder
	b.WriteString("file:")
	for i := 0; i < len(abs); i++ {
		c := abs[i]
		if c == '/' || c == '-' || c == '_' || c == '.' || c == '~' ||
			'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	fmt.Fprintf(&b, "?_pragma=busy_timeout(%d)&_pragma=synchronous(NORMAL)&_pragma=journal_size_limit(%d)&_txlock=immediate",
		busyTimeout, walTruncateAt)
	b.WriteString(platformPragmas)
	if readOnly {
		b.WriteString("&mode=ro")
	}
	return b.String()
}

// prepareFile creates a missing directory (0700, when mkdir says so; else
// it is an error) and a missing ledger file (0600) before SQLite opens it,
// so -wal and -shm copy that mode, and returns the file SQLite will open
// (a link's target). Directories, devices, FIFOs and symbolic links that
// SQLite would follow to a missing file or to another user's file are
// refused.
func prepareFile(abs string, mkdir bool) (real string, err error) {
	dir := filepath.Dir(abs)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if !mkdir {
			return "", &ledger.StoreError{Op: "open", Path: abs, Err: fmt.Errorf("directory %s does not exist", dir),
				Hint: "check the path in --ledger or IDEM_LEDGER; to start a ledger there, create the directory first (mkdir -m 700)"}
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", &ledger.StoreError{Op: "create directory", Path: dir, Err: err, Hint: permHint(err)}
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return "", &ledger.StoreError{Op: "create directory", Path: dir, Err: err, Hint: permHint(err)}
		}
	}
	fi, err := os.Lstat(abs)
	real = abs
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if real, fi, err = followLink(abs); err != nil {
			return "", err
		}
	}
	switch {
	case err == nil && fi.IsDir():
		return "", &ledger.StoreError{Op: "open", Path: abs, Err: errors.New("is a directory"),
			Hint: "point --ledger or IDEM_LEDGER at a file, not a directory"}
	case err == nil && !fi.Mode().IsRegular():
		return "", &ledger.StoreError{Op: "open", Path: abs, Err: fmt.Errorf("is %s, not a regular file", fileKind(fi.Mode())),
			Hint: "point --ledger or IDEM_LEDGER at a regular file"}
	case err == nil:
		// SQLite would open a file it may not write read-only, and leave
		// -wal and -shm behind: refuse it first.
		if err := unix.Faccessat(unix.AT_FDCWD, real, unix.R_OK|unix.W_OK, unix.AT_EACCESS); err != nil {
			return "", &ledger.StoreError{Op: "open", Path: abs, Err: fmt.Errorf("cannot read and write it: %w", err),
				Hint: "check the permissions of the ledger file and its directory"}
		}
		return real, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", &ledger.StoreError{Op: "open", Path: abs, Err: err, Hint: permHint(err)}
	}
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return abs, nil // another process created it first
	}
	if err != nil {
		return "", &ledger.StoreError{Op: "create", Path: abs, Err: err, Hint: permHint(err)}
	}
	err = f.Chmod(0o600) // whatever the umask
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", &ledger.StoreError{Op: "create", Path: abs, Err: err}
	}
	return abs, nil
}

// checkFile is prepareFile for a read-only open: it creates nothing, and
// the file needs only read permission. A missing or empty file is no
// ledger (ledger.ErrNoLedger).
func checkFile(abs string) (real string, err error) {
	fi, err := os.Lstat(abs)
	real = abs
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		real, fi, err = followLink(abs)
		var se *ledger.StoreError
		if errors.As(err, &se) && errors.Is(se.Err, errMissingTarget) {
			return "", noLedger(abs)
		}
		if err != nil {
			return "", err
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", noLedger(abs)
	case err != nil:
		return "", &ledger.StoreError{Op: "open", Path: abs, Err: err, Hint: permHint(err)}
	case fi.IsDir():
		return "", &ledger.StoreError{Op: "open", Path: abs, Err: errors.New("is a directory"),
			Hint: "point --ledger or IDEM_LEDGER at a file, not a directory"}
	case !fi.Mode().IsRegular():
		return "", &ledger.StoreError{Op: "open", Path: abs, Err: fmt.Errorf("is %s, not a regular file", fileKind(fi.Mode())),
			Hint: "point --ledger or IDEM_LEDGER at a regular file"}
	case fi.Size() == 0:
		return "", noLedger(abs)
	}
	if err := unix.Faccessat(unix.AT_FDCWD, real, unix.R_OK, unix.AT_EACCESS); err != nil {
		return "", &ledger.StoreError{Op: "open", Path: abs, Err: fmt.Errorf("cannot read it: %w", err),
			Hint: "check the permissions of the ledger file and its directory"}
	}
	return real, nil
}

func noLedger(path string) error {
	return ledger.PlanError(ledger.ErrNoLedger, path, noLedgerHint, "")
}

const noLedgerHint = "check --ledger or IDEM_LEDGER: idem run creates the ledger on its first run"

// errMissingTarget is followLink's reason for a dangling link.
var errMissingTarget = errors.New("is a symbolic link to a missing file")

// followLink resolves a ledger path that is a symbolic link. SQLite follows
// it and puts -wal and -shm beside the target, so the target must exist (a
// dangling link would have SQLite create it with the umask's mode, readable
// by others) and be the caller's own (another user's file would decide what
// idem runs and replays, and idem would write into it).
func followLink(abs string) (string, fs.FileInfo, error) {
	real, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, &ledger.StoreError{Op: "open", Path: abs, Err: errMissingTarget,
			Hint: "point --ledger or IDEM_LEDGER at the link's target: idem creates it, private"}
	}
	if err != nil {
		return "", nil, &ledger.StoreError{Op: "open", Path: abs, Err: err}
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", nil, &ledger.StoreError{Op: "open", Path: abs, Err: err, Hint: permHint(err)}
	}
	if uid, ok := owner(fi); ok && uid != os.Geteuid() {
		return "", nil, &ledger.StoreError{Op: "open", Path: abs,
			Err:  fmt.Errorf("is a symbolic link to a file owned by another user (uid %d): %s", uid, real),
			Hint: "point --ledger or IDEM_LEDGER at a ledger of your own"}
	}
	return real, fi, nil
}

// tighten takes group and other permissions off the ledger and its -wal
// and -shm when they are the caller's: the ledger holds command output.
// Other users' files are left as they are. Only modes change: no file is
// opened (closing a descriptor would drop SQLite's locks).
func tighten(path string) ([]string, error) {
	var done []string
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 == 0 {
			continue
		}
		if uid, ok := owner(fi); !ok || uid != os.Geteuid() {
			continue
		}
		mode := fi.Mode().Perm() & 0o700
		if err := os.Chmod(p, mode); err != nil {
			return done, &ledger.StoreError{Op: "tighten permissions", Path: p, Err: err}
		}
		done = append(done, fmt.Sprintf("%s was mode %#o, now %#o", p, fi.Mode().Perm(), mode))
	}
	return done, nil
}

func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a special file"
}

func owner(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

func permHint(err error) string {
	if errors.Is(err, fs.ErrPermission) {
		return "check the permissions of the ledger's directory and file"
	}
	return ""
}

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

// Describe returns the ledger's path.
func (s *Ledger) Describe() string { return s.path }

// Identity is the ledger's identity (see ledger.Identity): derived from the
// main file's device and inode, which every process on this host sees
// alike, whatever path (symlink, bind mount into a container) it uses, and
// which no other file has while this one exists. "" if it cannot be read.
func (s *Ledger) Identity() string {
	var st syscall.Stat_t
	if err := syscall.Stat(s.path, &st); err != nil {
		return ""
	}
	return ledger.MakeIdentity("sqlite", uint64(st.Dev), st.Ino)
}

// Close releases the connection (SQLite checkpoints the WAL).
func (s *Ledger) Close() error {
	if s.conn != nil {
		s.conn.Close()
	}
	return s.db.Close()
}

// CloseAtExit leaves the ledger open, for a process that exits right
// after (see ledger.CloseAtExit): closing the last connection checkpoints
// the WAL into the database and deletes it, two fsyncs that buy nothing,
// as every transaction is already committed in the WAL, as durable as its
// synchronous level made it. Exiting releases the locks, and the next
// opener reads the WAL, which trimWAL keeps short. It returns nil.
func (s *Ledger) CloseAtExit() error { return nil }

// trimWAL checkpoints the WAL into the database and truncates it to zero
// once it has grown past walTruncateAt; SetChild (while the command runs),
// Finish and a replay, which end a run, call it. It is needed because runs
// exit without closing the ledger (CloseAtExit): the next process to open
// it alone recovers the WAL from the file and counts none of its frames as
// checkpointed, so the WAL would never restart, every open would read all
// of it, and SQLite's own wal_autocheckpoint would copy all of it again at
// every commit past its threshold. Only a truncated WAL leaves the next
// opener nothing to read. It is opportunistic: with busy_timeout 0 it gives
// up at once when another process is reading or writing (which then shares
// the WAL index, so SQLite's checkpoints work), and its errors are ignored:
// every transaction is already committed, and the next run tries again.
func (s *Ledger) trimWAL(ctx context.Context) {
	fi, err := os.Stat(s.path + "-wal") // a stat opens no descriptor: the locks are safe
	if err != nil || fi.Size() < walTruncateAt {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if _, err := s.conn.ExecContext(ctx, `PRAGMA busy_timeout = 0`); err != nil {
		return
	}
	s.conn.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
	s.conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, busyTimeout))
}

// write runs fn in one BEGIN IMMEDIATE transaction, retrying a bounded number
// of times when SQLite reports BUSY beyond its own timeout.
func (s *Ledger) write(ctx context.Context, op string, fn func(*sql.Tx) error) error {
	return s.writeSync(ctx, op, false, fn)
}

// writeSync is write that commits with synchronous=FULL when full (the WAL
// is fsynced at the commit), else NORMAL. The level is set only when it
// changes, so that a run's last write, its outcome, leaves it at FULL
// rather than paying one more statement before exit to set NORMAL again.
func (s *Ledger) writeSync(ctx context.Context, op string, full bool, fn func(*sql.Tx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.full != full {
		level := "NORMAL"
		if full {
			level = "FULL"
		}
		if _, err := s.conn.ExecContext(ctx, `PRAGMA synchronous = `+level); err != nil {
			return storeErr(op, s.path, err)
		}
		s.full = full
	}
	var err error
	reread := false
	for try := 0; try < busyRetries; try++ {
		var committing bool
		err, committing = s.writeOnce(ctx, fn)
		if !committing && !reread && isReadFault(err) && ctx.Err() == nil {
			// A read that failed (one transient EIO reads as a damaged
			// page) before anything was committed: the transaction rolled
			// back, so it is run once more before the ledger is called
			// corrupt.
			reread = true
			continue
		}
		if !isBusy(err) || ctx.Err() != nil {
			break
		}
	}
	return s.wrap(op, err)
}

// writeOnce runs fn in one transaction; committing says whether err came
// from the commit (whose outcome is then unknown).
func (s *Ledger) writeOnce(ctx context.Context, fn func(*sql.Tx) error) (err error, committing bool) {
	tx, err := s.conn.BeginTx(ctx, nil)
	if err != nil {
		return err, false
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err, false
	}
	return tx.Commit(), true
}

// isReadFault reports an error that a failed read of the ledger's files
// gives: SQLITE_IOERR_READ and _SHORT_READ, or SQLITE_CORRUPT.
func isReadFault(err error) bool {
	var e *msqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code() {
	case 266, 522, 11: // IOERR_READ, IOERR_SHORT_READ, CORRUPT
		return true
	}
	return e.Code()&0xff == 11
}

// wrap turns driver errors into *StoreError and passes contract errors on.
func (s *Ledger) wrap(op string, err error) error {
	var mismatch *ledger.MismatchError
	switch {
	case err == nil, errors.Is(err, ledger.ErrNotFound), errors.Is(err, ledger.ErrLeaseLost), errors.As(err, &mismatch),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return storeErr(op, s.path, err)
}

func storeErr(op, path string, err error) error {
	se := &ledger.StoreError{Op: op, Path: path, Err: err}
	var e *msqlite.Error
	if errors.As(err, &e) {
		switch e.Code() & 0xff {
		case 26: // SQLITE_NOTADB
			return notLedger(path)
		case 11: // SQLITE_CORRUPT
			se.Err = errors.New("the database is corrupt")
			se.Hint = corruptHint
		case 15: // SQLITE_PROTOCOL: a lock request (fcntl) failed
			se.Err = fmt.Errorf("the file system refused the locks SQLite needs (SQLite code %d, locking protocol)", e.Code())
			se.Hint = lockHint
		case 10: // SQLITE_IOERR: read, write, fsync, shm... (ENOSPC on -shm, EIO)
			se.Err = fmt.Errorf("I/O error on the ledger's files (SQLite code %d)", e.Code())
			se.Hint = "check free space and the health of the disk that holds the ledger"
			switch e.Code() {
			case 2058, 2314, 3594, 3850: // IOERR_UNLOCK, _RDLOCK, _CHECKRESERVEDLOCK, _LOCK
				se.Err = fmt.Errorf("a lock on the ledger's files failed (SQLite code %d)", e.Code())
				se.Hint = lockHint
			}
		case 13: // SQLITE_FULL
			se.Err = errors.New("disk full")
			se.Hint = "free space on the ledger's file system"
		case 8, 3, 23: // READONLY, PERM, AUTH
			switch e.Code() {
			case 1544: // SQLITE_READONLY_DIRECTORY
				se.Err = errors.New("cannot create the ledger's -wal and -shm files: its directory is not writable")
			case 8, 264, 520, 776, 1032, 1288: // SQLITE_READONLY and its file-level variants
				se.Err = fmt.Errorf("the ledger is read-only (SQLite code %d)", e.Code())
			}
			se.Hint = "check the permissions of the ledger file and its directory"
		case 14: // CANTOPEN
			se.Hint = "check that the ledger's directory exists and is writable"
		case 5, 6: // BUSY, LOCKED
			se.Err = errors.New("the ledger stayed locked by another process")
			se.Hint = "retry; if it persists, look for a stuck process holding the ledger"
		}
	}
	return se
}

// lockHint is for lock requests (fcntl) that fail.
const lockHint = "keep the ledger on a local file system: network file systems (NFS, SMB) and some FUSE file systems do not support the locks SQLite needs; a fleet shares a PostgreSQL ledger"

func isBusy(err error) bool {
	var e *msqlite.Error
	return errors.As(err, &e) && (e.Code()&0xff == 5 || e.Code()&0xff == 6)
}

// ms converts a time to Unix milliseconds; the zero time maps to NULL.
func ms(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
}

func fromMS(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.UnixMilli(n.Int64)
}

const recordColumns = `rowid, key, fingerprint, command, status, attempts, max_attempts, exit_code, exit_source, token,
	owner_host, owner_boot_id, owner_pidns, owner_pid, owner_start, child_pgid, child_start, lease_expires_ms,
	created_ms, started_ms, updated_ms, finished_ms, duration_ms, ttl_ms, expires_ms, replays, last_replay_ms,
	output_stored, stdout_truncated, stderr_truncated, coalesce(class, ''), coalesce(reason, ''),
	coalesce(run_cwd, ''), coalesce(run_user, ''), ` + ledger.CounterColumns

type scanner interface{ Scan(...any) error }

func scanRecord(row scanner, extra ...any) (*ledger.Record, error) {
	var (
		r                                ledger.Record
		command                          string
		exit, finished, dur, exp, replay sql.NullInt64
		lease, created, started, updated int64
		ttl                              int64
		pidns, ownerStart, childStart    int64
		stored, outTrunc, errTrunc       bool
	)
	dest := []any{&r.Seq, &r.Key, &r.Fingerprint, &command, &r.Status, &r.Attempts, &r.MaxAttempts, &exit, &r.ExitSource, &r.Token,
		&r.Owner.Host, &r.Owner.BootID, &pidns, &r.Owner.PID, &ownerStart, &r.Owner.ChildPGID, &childStart, &lease,
		&created, &started, &updated, &finished, &dur, &ttl, &exp, &r.Replays, &replay,
		&stored, &outTrunc, &errTrunc, &r.Class, &r.Reason, &r.Cwd, &r.User}
	dest = append(dest, r.Counters.Fields()...)
	if err := row.Scan(append(dest, extra...)...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ledger.ErrNotFound
		}
		return nil, err
	}
	if err := json.Unmarshal([]byte(command), &r.Command); err != nil {
		return nil, fmt.Errorf("record %q: bad command column: %w", r.Key, err)
	}
	r.ExitCode, r.HasExit = int(exit.Int64), exit.Valid
	r.Owner.PIDNS, r.Owner.StartTime, r.Owner.ChildStart = uint64(pidns), uint64(ownerStart), uint64(childStart)
	r.LeaseExpiry = time.UnixMilli(lease)
	r.Created, r.Started, r.Updated = time.UnixMilli(created), time.UnixMilli(started), time.UnixMilli(updated)
	r.Finished, r.Expires, r.LastReplay = fromMS(finished), fromMS(exp), fromMS(replay)
	r.Duration = time.Duration(dur.Int64) * time.Millisecond
	r.TTL = time.Duration(ttl) * time.Millisecond
	r.OutputStored, r.StdoutTruncated, r.StderrTruncated = stored, outTrunc, errTrunc
	return &r, nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func getRecord(ctx context.Context, q querier, key string, withOutput bool) (*ledger.Record, error) {
	if !withOutput {
		return scanRecord(q.QueryRowContext(ctx, `SELECT `+recordColumns+` FROM records WHERE key = ?`, key))
	}
	return scanWithOutput(q.QueryRowContext(ctx, `SELECT `+recordColumns+`, stdout, stderr FROM records WHERE key = ?`, key))
}

// getReplayable reads key's record for Reserve, with its output only when
// it is final (succeeded or failed): what a replay needs, in the same
// statement, while an in-progress or retryable record's output is not read.
func getReplayable(ctx context.Context, q querier, key string) (*ledger.Record, error) {
	return scanWithOutput(q.QueryRowContext(ctx, `SELECT `+recordColumns+`,
		CASE WHEN status IN ('succeeded', 'failed') THEN stdout END,
		CASE WHEN status IN ('succeeded', 'failed') THEN stderr END FROM records WHERE key = ?`, key))
}

func scanWithOutput(row scanner) (*ledger.Record, error) {
	var stdout, stderr []byte
	r, err := scanRecord(row, &stdout, &stderr)
	if err != nil {
		return nil, err
	}
	r.Stdout, r.Stderr = stdout, stderr
	return r, nil
}

// tokenBlock is how many tokens one raise of the durable mark covers: a
// run pays the mark's FULL commit once per tokenBlock reservations, and
// once per boot.
const tokenBlock = 1024

// errRaiseMark is nextToken's answer when the next token is not covered by
// a durable mark written during this boot: the caller rolls back, calls
// raiseMark, and tries again.
var errRaiseMark = errors.New("the token mark must be raised first")

// nextToken draws the next fencing token, only below the durable mark
// written during this boot (see migrate_token_mark.sql): the token may
// then be lost with its NORMAL commit in a power cut, but never handed
// out again.
func (s *Ledger) nextToken(ctx context.Context, tx *sql.Tx) (int64, error) {
	var value, mark int64
	var boot string
	if err := tx.QueryRowContext(ctx, `SELECT c.value, m.mark, m.boot_id FROM counters c, token_mark m WHERE c.name = 'token'`).
		Scan(&value, &mark, &boot); err != nil {
		return 0, err
	}
	if boot != s.bootID || value >= mark {
		return 0, errRaiseMark
	}
	var token int64
	err := tx.QueryRowContext(ctx, `UPDATE counters SET value = value + 1 WHERE name = 'token' RETURNING value`).Scan(&token)
	return token, err
}

// raiseMark makes the next tokenBlock tokens durable before any of them is
// handed out: in a transaction committed with synchronous=FULL, the mark
// goes tokenBlock past the counter. When the mark was written during
// another boot, reservations after it may have been lost in a power cut
// with their counter updates, so the counter first jumps to the mark.
func (s *Ledger) raiseMark(ctx context.Context) error {
	return s.writeSync(ctx, "reserve a block of tokens", true, func(tx *sql.Tx) error {
		var value, mark int64
		var boot string
		if err := tx.QueryRowContext(ctx, `SELECT c.value, m.mark, m.boot_id FROM counters c, token_mark m WHERE c.name = 'token'`).
			Scan(&value, &mark, &boot); err != nil {
			return err
		}
		if boot == s.bootID && value < mark {
			return nil // another process raised it
		}
		if boot != s.bootID {
			value = max(value, mark)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE counters SET value = ? WHERE name = 'token'`, value); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE token_mark SET mark = ?, boot_id = ?`, value+tokenBlock, s.bootID)
		return err
	})
}

// setBoot records the boot id reservations are made in; empty: unknown.
func (s *Ledger) setBoot(boot string) {
	if boot != "" {
		s.bootID = boot
	}
}

// writeTokens is write for a transaction that may draw tokens: when the
// durable mark does not cover the next one, it raises the mark and runs
// fn again.
func (s *Ledger) writeTokens(ctx context.Context, op string, fn func(*sql.Tx) error) error {
	err := s.write(ctx, op, fn)
	if errors.Is(err, errRaiseMark) {
		if err := s.raiseMark(ctx); err != nil {
			return err
		}
		err = s.write(ctx, op, fn)
	}
	return err
}

func nullCode(code int, ok bool) sql.NullInt64 {
	return sql.NullInt64{Int64: int64(code), Valid: ok}
}

// Reserve implements Ledger: it reads the record and executes what
// ledger.Decide says, in one BEGIN IMMEDIATE transaction.
func (s *Ledger) Reserve(ctx context.Context, req ledger.ReserveRequest) (*ledger.Reservation, error) {
	var res *ledger.Reservation
	s.setBoot(req.Owner.BootID)
	st := &reserveSteps{s: s, req: req}
	err := s.writeTokens(ctx, "reserve", func(tx *sql.Tx) error {
		res = nil
		st.tx, st.now = tx, s.Now()
		rec, err := getReplayable(ctx, tx, st.req.Key)
		if err != nil && !errors.Is(err, ledger.ErrNotFound) {
			return err
		}
		st.rec = rec
		res, err = ledger.Execute(ctx, ledger.Decide(rec, st.req, st.now), rec, st)
		return err
	})
	if err != nil {
		return nil, err
	}
	if res.Outcome == ledger.Replay {
		s.trimWAL(ctx)
	}
	return res, nil
}

// reserveSteps are Reserve's ledger.Steps: its writes, in the transaction
// that read the record rec (nil when there is none) at now.
type reserveSteps struct {
	s   *Ledger
	tx  *sql.Tx
	req ledger.ReserveRequest
	rec *ledger.Record
	now time.Time
}

var _ ledger.Steps = (*reserveSteps)(nil)

// DeleteExpired implements ledger.Steps.
func (st *reserveSteps) DeleteExpired(ctx context.Context) error {
	if err := addTotals(ctx, st.tx, st.rec.Counters, 0, 1); err != nil {
		return err
	}
	return deleteKey(ctx, st.tx, st.req.Key)
}

// EndAbandoned implements ledger.Steps.
func (st *reserveSteps) EndAbandoned(ctx context.Context) error {
	_, err := st.tx.ExecContext(ctx, `UPDATE attempts SET ended_ms = ?, exit_code = ?, class = ?
		WHERE key = ? AND ended_ms IS NULL`, st.now.UnixMilli(), ledger.AbandonedExitCode, ledger.ClassAbandoned, st.req.Key)
	return err
}

// Close implements ledger.Steps.
func (st *reserveSteps) Close(ctx context.Context) error {
	_, err := st.tx.ExecContext(ctx, `UPDATE records SET status = 'failed', max_attempts = ?, updated_ms = ? WHERE key = ?`,
		st.req.MaxAttempts, st.now.UnixMilli(), st.req.Key)
	return err
}

// Abandon implements ledger.Steps.
func (st *reserveSteps) Abandon(ctx context.Context) error {
	token, err := st.s.nextToken(ctx, st.tx)
	if err != nil {
		return err
	}
	req, now := &st.req, st.now
	_, err = st.tx.ExecContext(ctx, `UPDATE records SET status = 'failed', exit_code = ?, exit_source = 'idem',
		token = ?, max_attempts = ?, finished_ms = ?, updated_ms = ?, duration_ms = ?,
		expires_ms = CASE WHEN ttl_ms > 0 THEN ? + ttl_ms END, class = 'abandoned', reason = NULL,
		att_abandoned = att_abandoned + 1, runs_failed = runs_failed + 1 WHERE key = ?`,
		ledger.AbandonedExitCode, token, req.MaxAttempts, now.UnixMilli(), now.UnixMilli(),
		now.Sub(st.rec.Started).Milliseconds(), now.UnixMilli(), req.Key)
	return err
}

// addTotals adds what removed records held to the ledger's totals, with
// how many were purged and how many expired. SQLite has one writer at a
// time, so one row (shard 0) serves.
func addTotals(ctx context.Context, tx *sql.Tx, c ledger.Counters, purged, expired int64) error {
	args := append(c.Fields(), purged, expired)
	for i, a := range args[:len(args)-2] {
		args[i] = *a.(*int64)
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO totals (shard, `+ledger.CounterColumns+`, purged, expired)
		VALUES (0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (shard) DO UPDATE SET replays = replays + excluded.replays,
			runs_succeeded = runs_succeeded + excluded.runs_succeeded, runs_failed = runs_failed + excluded.runs_failed,
			runs_retryable = runs_retryable + excluded.runs_retryable, att_success = att_success + excluded.att_success,
			att_transient = att_transient + excluded.att_transient, att_permanent = att_permanent + excluded.att_permanent,
			att_abandoned = att_abandoned + excluded.att_abandoned, att_interrupted = att_interrupted + excluded.att_interrupted,
			att_timeout = att_timeout + excluded.att_timeout, purged = purged + excluded.purged, expired = expired + excluded.expired`,
		args...)
	return err
}

func deleteKey(ctx context.Context, tx *sql.Tx, key string) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM attempts WHERE key = ?`, key); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM records WHERE key = ?`, key)
	return err
}

// Create implements ledger.Steps.
func (st *reserveSteps) Create(ctx context.Context) (*ledger.Reservation, error) {
	tx, req, now := st.tx, &st.req, st.now
	token, err := st.s.nextToken(ctx, tx)
	if err != nil {
		return nil, err
	}
	command, err := json.Marshal(req.Command)
	if err != nil {
		return nil, err
	}
	o := req.Owner
	nowMS := now.UnixMilli()
	if _, err := tx.ExecContext(ctx, `INSERT INTO records (key, fingerprint, command, status, attempts, max_attempts, token,
		owner_host, owner_boot_id, owner_pidns, owner_pid, owner_start, lease_expires_ms, created_ms, started_ms, updated_ms,
		run_cwd, run_user)
		VALUES (?, ?, ?, 'in_progress', 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		req.Key, req.Fingerprint, string(command), req.MaxAttempts, token,
		o.Host, o.BootID, int64(o.PIDNS), o.PID, int64(o.StartTime), now.Add(req.Lease).UnixMilli(), nowMS, nowMS, nowMS,
		req.Cwd, req.User); err != nil {
		return nil, err
	}
	id, err := insertAttempt(ctx, tx, req.Key, 1, token, o, now)
	if err != nil {
		return nil, err
	}
	return &ledger.Reservation{Outcome: ledger.Reserved, Token: token, Attempt: 1, AttemptID: id}, nil
}

// Take implements ledger.Steps: the record's previous attempts number
// done.
func (st *reserveSteps) Take(ctx context.Context, done int, prev *ledger.Snapshot, abandoned bool) (*ledger.Reservation, error) {
	tx, req, now := st.tx, &st.req, st.now
	token, err := st.s.nextToken(ctx, tx)
	if err != nil {
		return nil, err
	}
	o := req.Owner
	n := done + 1
	nowMS := now.UnixMilli()
	if _, err := tx.ExecContext(ctx, `UPDATE records SET status = 'in_progress', attempts = ?, max_attempts = ?, token = ?,
		owner_host = ?, owner_boot_id = ?, owner_pidns = ?, owner_pid = ?, owner_start = ?, child_pgid = 0, child_start = 0,
		lease_expires_ms = ?, started_ms = ?, updated_ms = ?, finished_ms = NULL, expires_ms = NULL,
		run_cwd = ?, run_user = ?, att_abandoned = att_abandoned + ? WHERE key = ?`,
		n, req.MaxAttempts, token, o.Host, o.BootID, int64(o.PIDNS), o.PID, int64(o.StartTime),
		now.Add(req.Lease).UnixMilli(), nowMS, nowMS, req.Cwd, req.User, abandoned, req.Key); err != nil {
		return nil, err
	}
	id, err := insertAttempt(ctx, tx, req.Key, n, token, o, now)
	if err != nil {
		return nil, err
	}
	return &ledger.Reservation{Outcome: ledger.Reserved, Token: token, Attempt: n, AttemptID: id, Prev: prev}, nil
}

func insertAttempt(ctx context.Context, tx *sql.Tx, key string, n int, token int64, o ledger.Owner, now time.Time) (int64, error) {
	var id int64
	err := tx.QueryRowContext(ctx, `INSERT INTO attempts (key, n, token, host, pid, started_ms) VALUES (?, ?, ?, ?, ?, ?) RETURNING id`,
		key, n, token, o.Host, o.PID, now.UnixMilli()).Scan(&id)
	return id, err
}

// Replay implements ledger.Steps. The record as read carries its output;
// one a step made final in this transaction is read again.
func (st *reserveSteps) Replay(ctx context.Context, changed bool) (*ledger.Reservation, error) {
	rec := st.rec
	if changed {
		var err error
		if rec, err = getRecord(ctx, st.tx, st.req.Key, true); err != nil {
			return nil, err
		}
	}
	return countReplay(ctx, st.tx, rec, st.now)
}

// countReplay counts one suppressed duplicate of rec, read with its output
// in this transaction, and returns it as replayed.
func countReplay(ctx context.Context, tx *sql.Tx, rec *ledger.Record, now time.Time) (*ledger.Reservation, error) {
	nowMS := now.UnixMilli()
	if _, err := tx.ExecContext(ctx, `UPDATE records SET replays = replays + 1, last_replay_ms = ? WHERE key = ?`,
		nowMS, rec.Key); err != nil {
		return nil, err
	}
	rec.Replays++
	rec.LastReplay = time.UnixMilli(nowMS)
	return &ledger.Reservation{Outcome: ledger.Replay, Record: rec}, nil
}

// fenced runs an owner's UPDATE and turns "no row" into ErrLeaseLost.
func fenced(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ledger.ErrLeaseLost
	}
	return nil
}

// SetChild implements Ledger. The command is running by then, so this is
// where a run trims a WAL that has grown long: the checkpoint overlaps the
// command instead of delaying idem's exit after the outcome.
func (s *Ledger) SetChild(ctx context.Context, key string, token int64, pgid int, start uint64) error {
	err := s.write(ctx, "record child", func(tx *sql.Tx) error {
		return fenced(tx.ExecContext(ctx, `UPDATE records SET child_pgid = ?, child_start = ? WHERE key = ? AND token = ?`,
			pgid, int64(start), key, token))
	})
	if err == nil {
		s.trimWAL(ctx)
	}
	return err
}

// Renew implements Ledger.
func (s *Ledger) Renew(ctx context.Context, key string, token int64, lease time.Duration) error {
	return s.write(ctx, "renew lease", func(tx *sql.Tx) error {
		now := s.Now()
		return fenced(tx.ExecContext(ctx, `UPDATE records SET lease_expires_ms = ?, updated_ms = ? WHERE key = ? AND token = ?`,
			now.Add(lease).UnixMilli(), now.UnixMilli(), key, token))
	})
}

// EndAttempt implements Ledger.
func (s *Ledger) EndAttempt(ctx context.Context, e ledger.AttemptEnd) error {
	return s.write(ctx, "record attempt", func(tx *sql.Tx) error {
		now := s.Now().UnixMilli()
		if err := fenced(tx.ExecContext(ctx, `UPDATE records SET exit_code = ?, exit_source = 'child', updated_ms = ?,
			class = ?, reason = ?`+ledger.BumpSQL(e.Class, "")+` WHERE key = ? AND token = ?`,
			e.ExitCode, now, e.Class, ledger.ReasonArg(e.StderrTail), e.Key, e.Token)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE attempts SET ended_ms = ?, exit_code = ?, class = ?, delay_ms = ?, stderr_tail = ? WHERE id = ?`,
			now, e.ExitCode, e.Class, e.Delay.Milliseconds(), ledger.Tail(e.StderrTail), e.AttemptID)
		return err
	})
}

// StartAttempt implements Ledger.
func (s *Ledger) StartAttempt(ctx context.Context, key string, token int64, lease time.Duration) (int, int64, error) {
	var n int
	var id int64
	err := s.write(ctx, "start attempt", func(tx *sql.Tx) error {
		now := s.Now()
		var o ledger.Owner
		err := tx.QueryRowContext(ctx, `UPDATE records SET attempts = attempts + 1, lease_expires_ms = ?, updated_ms = ?,
			child_pgid = 0, child_start = 0 WHERE key = ? AND token = ? RETURNING attempts, owner_host, owner_pid`,
			now.Add(lease).UnixMilli(), now.UnixMilli(), key, token).Scan(&n, &o.Host, &o.PID)
		if errors.Is(err, sql.ErrNoRows) {
			return ledger.ErrLeaseLost
		}
		if err != nil {
			return err
		}
		id, err = insertAttempt(ctx, tx, key, n, token, o, now)
		return err
	})
	return n, id, err
}

// Finish implements Ledger. It commits with synchronous=FULL: once it
// returns nil the outcome survives a power cut. When the commit itself fails
// the state is unknown, so the record is read again: Finish returns nil only
// if the outcome is there.
func (s *Ledger) Finish(ctx context.Context, req ledger.FinishRequest) error {
	stdout, stderr := req.Output()
	err := s.writeSync(ctx, "record outcome", true, func(tx *sql.Tx) error {
		now := s.Now().UnixMilli()
		var expires sql.NullInt64
		if req.TTL > 0 {
			expires = sql.NullInt64{Int64: now + req.TTL.Milliseconds(), Valid: true}
		}
		tail := req.Tail()
		if err := fenced(tx.ExecContext(ctx, `UPDATE records SET status = ?, exit_code = ?, exit_source = ?, updated_ms = ?,
			finished_ms = ?, duration_ms = ?, ttl_ms = ?, expires_ms = ?, lease_expires_ms = 0, output_stored = ?,
			stdout = ?, stderr = ?, stdout_truncated = ?, stderr_truncated = ?, class = ?, reason = ?`+ledger.BumpSQL(req.Class, req.Status)+`
			WHERE key = ? AND token = ?`,
			req.Status, req.ExitCode, req.ExitSource, now, now, req.Duration.Milliseconds(), req.TTL.Milliseconds(), expires,
			req.OutputStored, stdout, stderr, req.StdoutTruncated, req.StderrTruncated, req.Class, ledger.ReasonArg(tail),
			req.Key, req.Token)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE attempts SET ended_ms = ?, exit_code = ?, class = ?, stderr_tail = ? WHERE id = ?`,
			now, req.ExitCode, req.Class, tail, req.AttemptID)
		return err
	})
	if err == nil {
		if err := s.checkFiles("record outcome"); err != nil {
			return err
		}
		s.trimWAL(ctx)
		return nil
	}
	var se *ledger.StoreError
	if errors.As(err, &se) && req.Landed(getRecord(context.WithoutCancel(ctx), s.conn, req.Key, false)) {
		return nil
	}
	return err
}

// Release implements Ledger.
func (s *Ledger) Release(ctx context.Context, key string, token, attemptID int64, prev *ledger.Snapshot) error {
	return s.writeTokens(ctx, "release", func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM attempts WHERE id = ?`, attemptID); err != nil {
			return err
		}
		if prev == nil {
			return fenced(tx.ExecContext(ctx, `DELETE FROM records WHERE key = ? AND token = ?`, key, token))
		}
		// A fresh token fences the releasing owner out: it must not write again.
		fresh, err := s.nextToken(ctx, tx)
		if err != nil {
			return err
		}
		return fenced(tx.ExecContext(ctx, `UPDATE records SET status = ?, attempts = ?, max_attempts = ?, exit_code = ?,
			finished_ms = ?, expires_ms = ?, lease_expires_ms = 0, child_pgid = 0, child_start = 0, updated_ms = ?, token = ?
			WHERE key = ? AND token = ?`,
			prev.Status, prev.Attempts, prev.MaxAttempts, nullCode(prev.ExitCode, prev.HasExit),
			ms(prev.Finished), ms(prev.Expires), s.Now().UnixMilli(), fresh, key, token))
	})
}

// Get implements Ledger.
func (s *Ledger) Get(ctx context.Context, key string) (*ledger.Record, error) {
	r, err := getRecord(ctx, s.conn, key, true)
	return r, s.wrap("read", err)
}

// History implements Ledger.
func (s *Ledger) History(ctx context.Context, key string) ([]ledger.Attempt, error) {
	rows, err := s.conn.QueryContext(ctx, `SELECT n, token, host, pid, started_ms, ended_ms, exit_code, class, delay_ms, stderr_tail
		FROM attempts WHERE key = ? ORDER BY id`, key)
	if err != nil {
		return nil, s.wrap("read", err)
	}
	defer rows.Close()
	var out []ledger.Attempt
	for rows.Next() {
		var (
			a              ledger.Attempt
			started        int64
			ended, code, d sql.NullInt64
			class          sql.NullString
		)
		if err := rows.Scan(&a.N, &a.Token, &a.Host, &a.PID, &started, &ended, &code, &class, &d, &a.StderrTail); err != nil {
			return nil, s.wrap("read", err)
		}
		a.Started, a.Ended = time.UnixMilli(started), fromMS(ended)
		a.ExitCode, a.HasExit = int(code.Int64), code.Valid
		a.Class = class.String
		a.Delay = time.Duration(d.Int64) * time.Millisecond
		out = append(out, a)
	}
	return out, s.wrap("read", rows.Err())
}
