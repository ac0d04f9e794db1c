// Package sqlite is the single-host backend of the ledger contract: one
// SQLite file (modernc.org/sqlite, no cgo) in WAL mode, one connection per
// process, every write a short BEGIN IMMEDIATE transaction. Reservations
// commit at synchronous=NORMAL and outcomes at FULL. Errors are the
// contract's: driver errors become *ledger.StoreError with a hint.
package sqlite

import (
	"context"
	"database/sql"
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

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/probe"
)

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
	// the reserving owner's (see reserveSteps.who), or, where that is
	// unknown, one made up for this process, so that each process then
	// counts as a new boot (its first reservation jumps past the mark).
	bootID string
	// real is the file SQLite opened (a link's target); mainID, walID and
	// shmID the identity of it, its -wal and its -shm when opened (see
	// checkFiles and shmChanged); watchShm says the -shm is to be
	// watched, and shmKnown that shmID is its identity.
	real                 string
	mainID, walID, shmID fileID
	watchShm, shmKnown   bool
	// Now is the clock; tests replace it.
	Now func() time.Time
	// Tightened names the ledger files whose group and other permissions
	// Open took away (the ledger holds command output); callers warn.
	Tightened []string
	// newEntries: this connection's open created one of the ledger's
	// files; the first durable commit syncs their directory.
	newEntries bool
	// id is the ledger's identity (its application_id), and stamp the
	// statement that writes it in every write transaction (setID).
	id    uint32
	stamp string
	// replayOnly, when set, is why the connection is in exclusive
	// locking mode (see open): Reserve then serves one replay, returns
	// replayOnly for anything else, and closes the connection.
	replayOnly error
	// guard is the run guard as the last token drawn read it, for
	// RunGuard to hand out once (see nextToken).
	guard *ledger.RunGuard
}

// Options is how OpenFile opens a ledger file.
type Options struct {
	ledger.Options
	// OtherOwner lets root open another user's ledger file to write (see
	// OtherOwnerEnv); anyone else is refused it.
	OtherOwner bool
}

// Open opens (creating when missing) the ledger at path to read and
// write. A missing parent directory is created 0700 and a missing file
// 0600. A file that is not an idem ledger, or one whose schema needs a
// newer idem, is refused untouched; an older one is migrated. Every error
// is a *StoreError.
func Open(ctx context.Context, path string) (*Ledger, error) {
	return open(ctx, path, Options{}, migrations)
}

// OpenWith opens the ledger at path as opts says: with opts.ReadOnly, an
// existing ledger is opened for reading only (the file needs only read
// permission; nothing is created, initialised, migrated or tightened).
// With opts.ReadOnly or opts.Existing, a missing or empty file is a
// *StoreError wrapping ledger.ErrNoLedger, and nothing is created. Every
// error is a *StoreError.
func OpenWith(ctx context.Context, path string, opts ledger.Options) (*Ledger, error) {
	return open(ctx, path, Options{Options: opts}, migrations)
}

// OpenFile is OpenWith with the file's own options. A write open refuses a
// ledger whose files another user owns (see checkOwners), and every open a
// -wal that may not belong to the ledger (see checkJournal).
func OpenFile(ctx context.Context, path string, opts Options) (*Ledger, error) {
	return open(ctx, path, opts, migrations)
}

// open is OpenFile for a given list of migrations (tests give it more).
func open(ctx context.Context, path string, opts Options, migrations []ledger.Migration) (*Ledger, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, &ledger.StoreError{Op: "open", Path: path, Err: err}
	}
	if opts.NoMkdir && (opts.ReadOnly || opts.Existing) {
		// Not "no ledger yet": no run would ever make one there.
		if err := missingDir(abs); err != nil {
			return nil, err
		}
	}
	var real string
	created := false
	switch {
	case opts.ReadOnly:
		real, err = checkFile(abs)
	case opts.Existing && missingOrEmpty(abs):
		return nil, noLedger(abs) // writing would initialise the file
	default:
		real, created, err = prepareFile(abs, !opts.NoMkdir)
	}
	if err != nil {
		return nil, err
	}
	f, err := readFiles(abs, real)
	if err == nil && !opts.ReadOnly {
		err = checkOwners(abs, real, f, opts.OtherOwner)
	}
	if err == nil {
		err = checkHotJournal(abs, f)
	}
	if err == nil {
		err = checkJournal(abs, real, f)
	}
	if err == nil && !opts.ReadOnly {
		err = createWAL(abs, real, f)
		keepFresh(real, f)
	}
	if err != nil {
		return nil, err
	}
	probe.At("ledger-files")
	d := dsn(abs, opts.ReadOnly, false)
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
	s := &Ledger{path: abs, Now: time.Now, bootID: fmt.Sprintf("process:%d:%x", os.Getpid(), rand.Uint64()),
		real: real, newEntries: !opts.ReadOnly && (created || !f.wal.exists)}
	err = s.connect(ctx, d, migrations, opts.ReadOnly)
	switch {
	case !isShmFault(err) || ctx.Err() != nil:
	case opts.ReadOnly:
		// As without a -wal (above): an empty one holds no commit.
		if fi, serr := os.Stat(real + "-wal"); serr == nil && fi.Size() == 0 {
			err = s.connect(ctx, d+"&immutable=1", migrations, true)
		}
	default:
		// SQLite could not make or grow the -shm (a full disk or quota,
		// after a close that deleted it). Connected in exclusive locking
		// mode, it keeps the -wal's index in its own memory and needs no
		// -shm, so a replay, which needs nothing written, still replays.
		// That mode holds the ledger's lock until the connection closes,
		// so it serves one replay only (see Reserve): a run would hold
		// every other process off the ledger for as long as its command
		// runs.
		s.replayOnly = err
		err = s.connectExclusive(ctx, migrations)
	}
	if err != nil {
		return nil, err
	}
	probe.At("ledger-checked")
	if opts.ReadOnly {
		return s, nil
	}
	// Only a file known to be an idem ledger has its modes changed.
	if s.Tightened, err = tighten(real, f); err != nil {
		s.Close()
		return nil, err
	}
	bindWAL(real) // one SQLite created meanwhile (another process removed idem's)
	s.noteFiles(real, f.shm)
	return s, nil
}

// connect opens s's connection with the DSN d and checks the ledger's
// schema; on error, nothing is left open.
func (s *Ledger) connect(ctx context.Context, d string, migrations []ledger.Migration, readOnly bool) error {
	db, err := sql.Open("sqlite", d)
	if err != nil {
		return &ledger.StoreError{Op: "open", Path: s.path, Err: err}
	}
	db.SetMaxOpenConns(1)
	growStack(len(s.path)) // before SQLite runs on this goroutine
	conn, err := db.Conn(ctx)
	if isReadFault(err) && ctx.Err() == nil {
		// The connection's pragmas read the file: one transient EIO reads
		// as a damaged page, so connect once more before calling it corrupt.
		conn, err = db.Conn(ctx)
	}
	if err != nil {
		db.Close()
		return storeErr("open", s.path, err)
	}
	probe.At("ledger-connected")
	s.db, s.conn = db, conn
	if err := s.checkSchema(ctx, migrations, readOnly); err != nil {
		s.Close()
		s.db, s.conn = nil, nil
		return err
	}
	return nil
}

// connectExclusive connects s in exclusive locking mode (see open). Such
// a connection takes the ledger's shared lock, then waits for its
// exclusive lock holding the shared one: two of them would each wait for
// the other until the busy timeout. So it waits for no lock (see dsn),
// and when the ledger is locked, closes, which lets its lock go, and
// tries again after a pause of a few milliseconds, as long as the busy
// timeout, that ends such a tie. If the ledger stays locked, the error is
// the -shm's.
func (s *Ledger) connectExclusive(ctx context.Context, migrations []ledger.Migration) error {
	end := time.Now().Add(busyTimeout * time.Millisecond)
	for {
		err := s.connect(ctx, dsn(s.path, false, true), migrations, false)
		if !errors.Is(err, errStayedLocked) {
			return err
		}
		if time.Now().After(end) {
			// Locked throughout: by a process that maps a -shm since
			// deleted, or by more replays than the time allows. Either
			// way the -shm is the cause to report.
			return s.replayOnly
		}
		t := time.NewTimer(time.Duration(1+rand.IntN(20)) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// freshAfter is how old the main file's modification time may grow
// before an open sets it to now: the ledger's writes go to its -wal, and
// reach the main file only at a checkpoint, so an age-based cleaner
// (systemd-tmpfiles, find -mtime) would otherwise delete the main file of
// a ledger in use, and every recorded key with it.
const freshAfter = time.Hour

// keepFresh sets the main file's and the -shm's times to now when they
// are older than freshAfter (before SQLite opens them: a path, no
// descriptor). The -shm is written through a memory map, which leaves its
// times as they were; SQLite sets them only when a process finds no other
// using it. So while runs overlap, it would age too, and a -shm deleted
// while in use makes the next process start another, beside the one the
// running ones share (see shmChanged).
func keepFresh(real string, f files) {
	for _, p := range []struct {
		name string
		fi   fileInfo
	}{{real, f.main}, {real + "-shm", f.shm}} {
		if p.fi.exists && time.Since(time.Unix(p.fi.st.Mtim.Unix())) > freshAfter {
			unix.UtimesNanoAt(unix.AT_FDCWD, p.name, nil, unix.AT_SYMLINK_NOFOLLOW)
		}
	}
}

// switchToWAL puts the ledger in WAL mode, and makes its -wal, bound,
// before anything is written to it: SQLite would create it with the first
// write, and until a later binding, another process opening the ledger
// would find a -wal with transactions bound to nothing, and refuse it.
// Processes that open a ledger in rollback mode at once all switch it:
// the switch upgrades a read lock to a write lock within one statement,
// and SQLite answers BUSY at once, without its busy timeout, while another
// process holds the write lock. Wait for that lock with an empty BEGIN
// IMMEDIATE (which does use the busy timeout), then try again: by then the
// winner has switched the file.
func (s *Ledger) switchToWAL(ctx context.Context, op string) error {
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
		return storeErr(op, s.path, err)
	}
	if mode != "wal" {
		return &ledger.StoreError{Op: op, Path: s.path, Err: fmt.Errorf("journal mode is %q, want wal", mode)}
	}
	var main unix.Stat_t
	if err := unix.Stat(s.real, &main); err != nil {
		return storeErr(op, s.path, err)
	}
	if err := makeWAL(s.real, &main); err != nil {
		return err
	}
	bindWAL(s.real) // one made first by another process, or by SQLite
	s.newEntries = true
	return nil
}

// missingOrEmpty reports whether no ledger was ever written at abs: no
// file (a link to none), or an empty regular file.
func missingOrEmpty(abs string) bool {
	fi, err := os.Stat(abs)
	return errors.Is(err, fs.ErrNotExist) || err == nil && fi.Mode().IsRegular() && fi.Size() == 0
}

// dsn builds a file: URI for modernc: the path percent-escaped so that no
// user text can add URI or _pragma parameters, then our fixed parameters.
// Reservations commit with synchronous=NORMAL; Finish switches to FULL.
// A read-only ledger is opened with mode=ro: SQLite itself refuses writes.
// With exclusive, the connection takes the ledger's lock in exclusive
// locking mode, set before anything is read, and so uses no -shm; it
// waits for no lock (see connectExclusive).
func dsn(abs string, readOnly, exclusive bool) string {
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
	b.WriteByte('?')
	timeout := busyTimeout
	if exclusive {
		b.WriteString("_pragma=locking_mode(EXCLUSIVE)&")
		timeout = 0
	}
	fmt.Fprintf(&b, "_pragma=busy_timeout(%d)&_pragma=synchronous(NORMAL)&_pragma=journal_size_limit(%d)&_txlock=immediate",
		timeout, walTruncateAt)
	b.WriteString(platformPragmas)
	if readOnly {
		b.WriteString("&mode=ro")
	}
	return b.String()
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

// Close releases the connection (SQLite checkpoints the WAL). A
// connection whose -shm was replaced is left open instead (see
// shmChanged): as the ledger's last, its close would checkpoint what its
// old index knows and delete the -wal, with what the processes on the new
// -shm committed there. Exiting releases it without either.
func (s *Ledger) Close() error {
	if s.shmReplaced() {
		return nil
	}
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
