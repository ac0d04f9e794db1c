package sqlite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/idemhq/idem/internal/ledger"
)

// The ledger's files are read before SQLite opens them, and SQLite opens
// them only when what they hold is what idem wrote: a ledger file, -wal,
// -shm or -journal of another user is refused for writing (it would decide
// what runs, and receive command output), and a -wal that cannot be shown
// to belong to the ledger file is refused before SQLite replays it (see
// checkJournal). The reads happen before this process has a connection to
// the ledger, so the descriptors they open and close drop no lock of
// SQLite's (a process holds one connection to a ledger at a time).

// files is the ledger's files as they are before SQLite opens them.
type files struct {
	main fileInfo
	// hdr is the first 100 bytes of the main file (the database header),
	// when it has them; page1 what follows it, page 1's b-tree header.
	hdr, page1 []byte
	wal        fileInfo
	// walHdr is the -wal's header and its first frame's header; walIDs
	// the identities its transactions carry (walIdentitiesAt), walValid
	// that it has a valid header.
	walHdr       []byte
	walIDs       []uint32
	walValid     bool
	shm, journal fileInfo
}

// fileInfo is one file's stat; exists false when there is none.
type fileInfo struct {
	exists bool
	st     unix.Stat_t
}

const (
	dbHeaderSize  = 100
	walHeaderSize = 32
	walFrameHdr   = 24
)

// readFiles reads the main file's header and the -wal's (and the
// identities its transactions carry), and stats the -shm and -journal. Every open is O_NOFOLLOW: a link beside the ledger
// is refused, never followed.
func readFiles(path, real string) (files, error) {
	var f files
	var err error
	// The header, and the b-tree header of page 1 after it (whether the
	// schema is empty).
	if f.main, f.hdr, err = readHead(path, real, dbHeaderSize+8, nil); err != nil {
		return f, err
	}
	if len(f.hdr) > dbHeaderSize {
		f.page1, f.hdr = f.hdr[dbHeaderSize:], f.hdr[:dbHeaderSize]
	}
	if f.wal, f.walHdr, err = readHead(path, real+"-wal", walHeaderSize+walFrameHdr, func(fd int, size int64) {
		f.walIDs, f.walValid = walIdentitiesAt(fdReader(fd), size)
	}); err != nil {
		return f, err
	}
	if f.wal.exists && f.wal.st.Mode&unix.S_IFMT != unix.S_IFREG {
		return f, notRegular(path, real+"-wal")
	}
	for _, p := range []struct {
		name string
		fi   *fileInfo
	}{{real + "-shm", &f.shm}, {real + "-journal", &f.journal}} {
		if err := unix.Lstat(p.name, &p.fi.st); err == nil {
			p.fi.exists = true
			if p.fi.st.Mode&unix.S_IFMT != unix.S_IFREG {
				return f, notRegular(path, p.name)
			}
		} else if !errors.Is(err, unix.ENOENT) {
			return f, &ledger.StoreError{Op: "open", Path: path, Err: fmt.Errorf("%s: %w", p.name, err), Hint: permHint(err)}
		}
	}
	return f, nil
}

// readHead opens name (not following a link), stats it, reads up to n
// bytes from its start and, when more is to be read, hands the open file
// and its size to more. A missing file is no error; one that cannot be
// opened to read (another user's -wal) is taken as it stats.
func readHead(path, name string, n int, more func(fd int, size int64)) (fileInfo, []byte, error) {
	var fi fileInfo
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return fi, nil, nil
	case errors.Is(err, unix.ELOOP):
		if name == path {
			return fi, nil, nil // the ledger path itself: followLink decided
		}
		return fi, nil, &ledger.StoreError{Op: "open", Path: path, Err: fmt.Errorf("%s is a symbolic link", name),
			Hint: "remove the link: idem never follows a link beside the ledger"}
	case errors.Is(err, unix.EACCES):
		if err := unix.Lstat(name, &fi.st); err != nil {
			return fi, nil, nil
		}
		fi.exists = true
		return fi, nil, nil
	case err != nil:
		return fi, nil, &ledger.StoreError{Op: "open", Path: path, Err: fmt.Errorf("%s: %w", name, err), Hint: permHint(err)}
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &fi.st); err != nil {
		return fi, nil, &ledger.StoreError{Op: "open", Path: path, Err: err}
	}
	fi.exists = true
	if fi.st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fi, nil, nil // the caller refuses what is not a regular file
	}
	buf := make([]byte, n)
	got, err := unix.Pread(fd, buf, 0)
	if err != nil {
		got, err = unix.Pread(fd, buf, 0) // once more: one EIO may be transient
	}
	if err != nil {
		return fi, nil, &ledger.StoreError{Op: "read", Path: path, Err: fmt.Errorf("I/O error reading %s: %w", name, err),
			Hint: "check the health of the disk that holds the ledger"}
	}
	if more != nil {
		more(fd, fi.st.Size)
	}
	return fi, buf[:got], nil
}

// fdReader reads a file by its descriptor (pread), for readHead's more.
type fdReader int

func (r fdReader) ReadAt(b []byte, off int64) (int, error) {
	n, err := unix.Pread(int(r), b, off)
	if err == nil && n < len(b) {
		err = io.EOF
	}
	return n, err
}

func notRegular(path, name string) error {
	return &ledger.StoreError{Op: "open", Path: path, Err: fmt.Errorf("%s is not a regular file", name),
		Hint: "remove it: idem never follows a link beside the ledger"}
}

// OtherOwnerEnv is the environment variable with which root uses a ledger
// file that another user owns (set to 1): the files SQLite creates beside
// it are then given to that user.
const OtherOwnerEnv = "IDEM_ALLOW_OTHER_OWNER"

// checkOwners refuses, for a write open, a ledger file or a file beside it
// that has another name (a hard link), and a ledger whose files are not the
// caller's, the way git refuses a repository of dubious ownership: another
// user who could create the ledger (a directory others may write) would
// decide which keys run, and would read what the commands print. With
// otherOwner, root may use a ledger file of another user; its -wal, -shm
// and -journal must then be that user's too, and any of root's among them
// (left by an older idem) is given to that user, so that root's use never
// locks the owner out. SQLite gives the files it creates as root to the
// main file's owner itself.
func checkOwners(path, real string, f files, otherOwner bool) error {
	euid := uint32(os.Geteuid())
	want := euid
	if otherOwner && euid == 0 && f.main.exists {
		want = f.main.st.Uid
	}
	for _, c := range []struct {
		suffix string
		fi     fileInfo
	}{{"", f.main}, {"-wal", f.wal}, {"-shm", f.shm}, {"-journal", f.journal}} {
		if c.fi.exists && c.fi.st.Nlink > 1 {
			// Another name leads to the file (a hard link another user
			// may make to any file it can write): the ledger's pages and
			// the commands' output would be written into that file too.
			return &ledger.StoreError{Op: "open", Path: path,
				Err:  fmt.Errorf("%s has %d names (hard links): another name leads to the same file", real+c.suffix, c.fi.st.Nlink),
				Hint: "with no idem running, find the other names (find / -xdev -samefile " + real + c.suffix + ") and remove those that are not the ledger's own: a ledger's files have one name each"}
		}
		if !c.fi.exists || c.fi.st.Uid == want {
			continue
		}
		if c.suffix != "" && c.fi.st.Uid == euid && want != euid {
			if err := os.Lchown(real+c.suffix, int(want), int(f.main.st.Gid)); err != nil {
				return &ledger.StoreError{Op: "open", Path: path, Err: err}
			}
			continue
		}
		owner := userName(c.fi.st.Uid)
		if c.suffix != "" {
			return &ledger.StoreError{Op: "open", Path: path,
				Err:  fmt.Errorf("its %s is owned by another user (%s, uid %d), not by the ledger's owner", c.suffix, owner, c.fi.st.Uid),
				Hint: "with no idem running, move " + real + c.suffix + " aside: the files beside a ledger are its owner's"}
		}
		hint := "run idem as the ledger's owner: runuser -u " + owner + " -- idem …"
		if owner == strconv.FormatUint(uint64(c.fi.st.Uid), 10) {
			// A user without a name (a systemd DynamicUser= service's):
			// runuser needs one.
			hint = fmt.Sprintf("run idem as the ledger's owner: setpriv --reuid %d --regid %d --clear-groups idem …", c.fi.st.Uid, c.fi.st.Gid)
		}
		if euid == 0 {
			hint += "; or set " + OtherOwnerEnv + "=1 to use it as root"
		}
		return &ledger.StoreError{Op: "open", Path: path,
			Err:  fmt.Errorf("the ledger file is owned by another user (%s, uid %d): it would decide what runs, and read what the commands print", owner, c.fi.st.Uid),
			Hint: hint}
	}
	return nil
}

// userName is uid's login name, else its number.
func userName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return u.Username
	}
	return id
}

// walFrames reports whether the -wal holds frames SQLite would replay: a
// valid header (magic, format, a page size) and a first frame whose salts
// are the header's. SQLite checks each frame's checksum as well; this
// counts a frame that would fail it as replayable, which only errs on the
// side of refusing.
func (f files) walFrames() bool {
	h := f.walHdr
	if len(h) < walHeaderSize+walFrameHdr {
		return false
	}
	be := binary.BigEndian
	if be.Uint32(h[0:])&^1 != 0x377f0682 || be.Uint32(h[4:]) != 3007000 {
		return false
	}
	return be.Uint32(h[16:]) == be.Uint32(h[walHeaderSize+8:]) && be.Uint32(h[20:]) == be.Uint32(h[walHeaderSize+12:])
}

// walMode reports whether the main file's header says WAL mode (file
// format read and write versions 2).
func (f files) walMode() bool {
	return len(f.hdr) == dbHeaderSize && f.hdr[18] == 2 && f.hdr[19] == 2
}

// rollbackMode reports whether the main file is a database in rollback
// (journal_mode=delete) mode, as a backup (VACUUM INTO) writes it.
func (f files) rollbackMode() bool {
	return len(f.hdr) == dbHeaderSize && f.hdr[18] == 1 && f.hdr[19] == 1
}

// isLedger reports whether the main file's header carries an idem
// ledger's application_id: only then does an open change anything about
// it before checkSchema has read it.
func (f files) isLedger() bool {
	return len(f.hdr) == dbHeaderSize && isIdemID(f.mainID())
}

// mainID is the application_id in the main file's header (0: none).
func (f files) mainID() uint32 {
	if len(f.hdr) < dbHeaderSize {
		return 0
	}
	return binary.BigEndian.Uint32(f.hdr[68:])
}

// walBelongs reports what the -wal's transactions say of the file they
// were written to (see walIdentities): proven, every one that carries an
// identity carries the main file's; foreign, one carries another's;
// neither when none carries one (a -wal of an older idem, or of another
// program), and the binding decides. The main file's header lags the
// -wal until a checkpoint, so two more are the ledger's own: beside a
// ledger made before ledgers had identities, an idem ledger's (its first
// run gives it one); and beside a new ledger, whose file has no identity
// and no table yet (all of it is in the -wal), an idem ledger's.
func (f files) walBelongs() (proven, foreign bool) {
	ids, ok := f.walIDs, f.walValid
	if !ok || len(ids) == 0 {
		return false, false
	}
	main := f.mainID()
	becoming := main == legacyApplicationID || main == 0 && f.emptySchema()
	for _, id := range ids {
		if id != main && !(becoming && isIdemID(id)) {
			return false, true
		}
	}
	return true, false
}

// emptySchema reports whether the main file's page 1, the schema's root,
// is a leaf with no cell: a database without a table.
func (f files) emptySchema() bool {
	return len(f.page1) >= 5 && f.page1[0] == 0x0d && f.page1[3] == 0 && f.page1[4] == 0
}

// checkJournal refuses a -wal that SQLite would replay onto a file it
// does not belong to, however it got there (a file copied or moved in, or
// copied over in place):
//   - a -wal with frames beside an empty or missing ledger file, or one in
//     rollback mode (a backup restored over the ledger while its -wal
//     stayed): SQLite creates and keeps a -wal only for a database in WAL
//     mode;
//   - a -wal whose transactions carry another ledger's identity, or whose
//     main file is not the ledger they were written to (walBelongs): a
//     -wal copied over this ledger's own in place, or another database
//     copied over the main file while its -wal stayed;
//   - a -wal written for another page size;
//   - where the transactions carry no identity (written by an older idem
//     or another program), a -wal bound to another main file, or bound to
//     none where the file system keeps extended attributes: idem binds
//     every -wal before it writes to it (see bind.go), and cp, tar and
//     rsync without -X drop the binding.
//
// A -wal whose transactions carry the main file's identity is replayed
// wherever it lies (a ledger moved with its -wal by a tool that drops
// extended attributes). What it cannot see: an older copy of this same
// ledger put in place of its main file while its -wal stayed (the
// documented restore removes the -wal, and idem backup writes rollback
// mode, which is refused).
func checkJournal(path, real string, f files) error {
	if !f.walFrames() {
		return nil
	}
	be := binary.BigEndian
	proven, foreign := f.walBelongs()
	bound, errno := walBinding(real)
	var why string
	notOurs := false // the -wal cannot be this file's: folding it in is no choice
	switch {
	case !f.main.exists || len(f.hdr) < dbHeaderSize:
		why, notOurs = "the ledger file is empty or missing but a -wal with transactions lies beside it", true
	case f.rollbackMode():
		why, notOurs = "the ledger file is not in WAL mode (a backup restored over it?) but a -wal with transactions lies beside it", true
	case foreign && !f.isLedger():
		why = "the -wal beside the ledger was written to an idem ledger, but the file beside it is not that ledger (another database copied over it?)"
	case foreign:
		why = "the -wal beside the ledger holds another ledger's transactions (copied over this one's?)"
	case pageSize(f.hdr) != be.Uint32(f.walHdr[8:]):
		why = "the -wal beside the ledger was written for another database (its page size differs)"
	case proven:
		return nil
	case errno == 0 && bound != idOf(&f.main.st).String():
		why = "the -wal beside the ledger belongs to another file: the ledger was moved, replaced or restored while its -wal stayed"
	case errno == errNoAttr:
		why = "the -wal beside the ledger is not bound to it (copied without extended attributes, or written by another program)"
	default:
		return nil
	}
	hint := "with no idem running: if the -wal is this ledger's own (moved with it), fold it in with sqlite3 " + path + " 'PRAGMA wal_checkpoint(TRUNCATE)'; else move the -wal and -shm aside (a restored backup needs neither)"
	switch {
	case foreign:
		hint = "with no idem running, move the -wal and -shm aside (never fold them in): the ledger's own last transactions, if they were in its -wal, are lost, so check the ledger with idem check or restore it from a backup"
	case notOurs:
		hint = "with no idem running, move the -wal and -shm aside: they are not this file's (a restored backup needs neither)"
	}
	return &ledger.StoreError{Op: "open", Path: path, Err: errors.New(why + "; SQLite would replay it onto this file"), Hint: hint}
}

// checkHotJournal refuses a file whose header does not carry an idem
// ledger's identity when a rollback journal lies beside it: SQLite would
// roll the journal back into the file as it opens it, whatever the
// header's journal mode, changing another program's file before
// checkSchema could call it foreign. Let through: a ledger's own journal
// (a crash while SQLite switched a restored backup to WAL), and a file
// with no table yet, which is what a new ledger is while another idem
// switches it to WAL (SQLite writes its first page under a journal; its
// identity comes with the schema, after).
func checkHotJournal(path string, f files) error {
	if !f.journal.exists || f.journal.st.Size == 0 || f.main.st.Size == 0 || f.isLedger() ||
		f.mainID() == 0 && f.emptySchema() {
		return nil
	}
	return notLedger(path)
}

// pageSize reads the page size from a database header (1 means 65536).
func pageSize(hdr []byte) uint32 {
	n := uint32(binary.BigEndian.Uint16(hdr[16:]))
	if n == 1 {
		return 65536
	}
	return n
}

// createWAL creates the missing -wal of a ledger in WAL mode before SQLite
// does, so that it is bound before anything is written to it, belongs to
// the ledger's owner, and its directory entry is synced by idem, which
// (unlike SQLite) reports a failed sync. Another process that creates it
// first wins; it binds it in its turn.
func createWAL(path, real string, f files) error {
	if f.wal.exists || !f.walMode() || !f.isLedger() {
		return nil
	}
	return makeWAL(real, &f.main.st)
}

// makeWAL creates the -wal beside real, whose main file's status is main,
// bound to it and owned as it is, and syncs its directory entry. A -wal
// that exists (another process, or SQLite, made it first) is left as it
// is, and so is one this user may not create: SQLite says what it cannot
// open.
func makeWAL(real string, main *unix.Stat_t) error {
	fd, err := unix.Open(real+"-wal", unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EROFS) {
		return nil // another process won; or SQLite says what it cannot create
	}
	if err != nil {
		return &ledger.StoreError{Op: "create", Path: real + "-wal", Err: err, Hint: permHint(err)}
	}
	if os.Geteuid() == 0 && main.Uid != 0 {
		err = unix.Fchown(fd, int(main.Uid), int(main.Gid))
	}
	if err == nil {
		err = unix.Fsetxattr(fd, walBindAttr, []byte(idOf(main).String()), 0)
		if errors.Is(err, unix.ENOTSUP) {
			err = nil
		}
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(real)
	}
	if err != nil {
		os.Remove(real + "-wal")
		return &ledger.StoreError{Op: "create", Path: real + "-wal", Err: err,
			Hint: "check the health of the disk that holds the ledger"}
	}
	return nil
}

// syncDir fsyncs the directory of path, so that a file created there
// survives a power cut. SQLite syncs the directory of a new -wal too, but
// ignores a failure; idem does not.
func syncDir(path string) error {
	fd, err := unix.Open(filepath.Dir(path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	err = unix.Fsync(fd)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync the directory %s: %w", filepath.Dir(path), err)
	}
	return nil
}

// syncNewEntries fsyncs the ledger's directory after the first durable
// (synchronous=FULL) commit of a connection that created one of the
// ledger's files, after SQLite's own sync of it, whose failure SQLite
// ignores: the outcome is durable only with the entry of the file that
// holds it. Write calls it; it is one bool test otherwise.
func (s *Ledger) syncNewEntries(op string) error {
	if !s.newEntries {
		return nil
	}
	if err := syncDir(s.real); err != nil {
		return &ledger.StoreError{Op: op, Path: s.path, Err: err, Hint: "check the health of the disk that holds the ledger"}
	}
	s.newEntries = false
	return nil
}
