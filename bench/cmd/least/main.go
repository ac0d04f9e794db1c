//go:build linux

// Command least is the least a program that keeps idem run's contract
// can do, as a lower bound under idem: what a design would pay with the
// same language, driver and durability, whatever its code. It is not idem
// and not a ledger anyone should use. It has only the two straight paths
// bench/run.sh measures, a fresh run of a command that ends at once and
// the replay of a finished key: no lease renewal, retries, waits,
// takeovers, key checks or failure classes. It builds on Linux only
// (OFD locks, Pdeathsig, close_range), where bench/run.sh measures.
//
// A fresh run: the descriptors it inherited kept from the command; the
// ledger file made 0600; the command's fingerprint; once the key is
// known fresh, the owner (host, boot, PID namespace, PID and its start
// time), the directory and the user; a fencing token drawn below a
// durable mark written during this boot, with the ledger's secret; the
// record and its lease inserted in one BEGIN IMMEDIATE transaction at
// synchronous=NORMAL, with the signals idem forwards caught before it
// commits (unless the parent ignored them); the command started in its
// own process group with Pdeathsig and idem's environment (IDEM_KEY,
// IDEM_TOKEN, IDEM_ATTEMPT, IDEM_MAX_ATTEMPTS, a private IDEM_RETRY_AFTER,
// a signed IDEM_RUN), its stdout and stderr passed through and kept up to
// 16 MiB; the outcome (128+N for a signal), the attempt's history, the
// totals and the output written in one fenced transaction at
// synchronous=FULL; the WAL truncated past 256 KiB. A replay: the record
// and its output read in one statement, its fingerprint and expiry
// compared, the replay counted on the record (the output in a table of
// its own, as idem keeps it, so that the count rewrites no output), the
// output written and the recorded code returned.
//
// Where the contract leaves a choice, least takes the cheaper way, even
// where idem cannot: the signal handlers and the owner are read only once
// a reservation has found its key fresh, so a replay never pays for them;
// the tables are keyed by the key (WITHOUT ROWID) and have no index of
// their own, which inspect's order and purge would want.
//
// With --checks it also keeps, in their least form, idem's checks against
// other programs and users on the host: the files beside the ledger
// checked before SQLite opens them (owner, links, file type; the main
// file's header read; the -wal read through as SQLite's recovery reads
// it, every committed page-1 frame's identity and its page size compared
// with the main file's, and its binding attribute with the main file's
// identity); the run lock taken on a description of its own, which the
// command inherits as fd 3; cell_size_check on; the head (identity,
// versions, page size, journal mode) read and the pages a run depends on
// checked in one statement (quick_check of the one-page counter table,
// the rightmost path of the others) before anything is written, and a
// fresh key's place in outputs before its command runs; the
// ledger's identity stamped in every write; the files checked again for
// replacement after the outcome's commit.
//
//	least [--checks] LEDGER KEY CMD [ARG...]
//	least --fill N LEDGER     (N finished records with a line of output
//	                          each, for a replay measured among them)
package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemhq/idem/internal/probe"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite"
)

// schema is made in one transaction, its identity first, so that every
// page 1 the -wal holds carries it. %d: the ledger's identity.
const schema = `BEGIN IMMEDIATE;
PRAGMA application_id = %d;
PRAGMA user_version = 1;
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL, mark INTEGER NOT NULL,
	boot TEXT NOT NULL, secret BLOB NOT NULL) WITHOUT ROWID;
INSERT INTO counters VALUES ('token', 0, 0, '', randomblob(32));
CREATE TABLE records (
	key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL,
	max_attempts INTEGER NOT NULL, exit_code INTEGER, token INTEGER NOT NULL, owner_host TEXT NOT NULL,
	owner_boot_id TEXT NOT NULL, owner_pidns INTEGER NOT NULL, owner_pid INTEGER NOT NULL,
	owner_start INTEGER NOT NULL, child_pgid INTEGER NOT NULL DEFAULT 0, child_start INTEGER NOT NULL DEFAULT 0,
	lease_expires_ms INTEGER NOT NULL, created_ms INTEGER NOT NULL, finished_ms INTEGER, expires_ms INTEGER,
	replays INTEGER NOT NULL DEFAULT 0, last_replay_ms INTEGER, run_cwd TEXT NOT NULL, run_user TEXT NOT NULL,
	history TEXT NOT NULL DEFAULT '', runs_succeeded INTEGER NOT NULL DEFAULT 0,
	runs_failed INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
CREATE TABLE outputs (key TEXT PRIMARY KEY, stdout BLOB, stderr BLOB) WITHOUT ROWID;
COMMIT;`

const (
	maxOutput  = 16 << 20 // bytes kept of each stream
	tokenBlock = 1024     // tokens a raise of the durable mark covers
	bindAttr   = "user.least.main"
)

func main() {
	probe.At("main")
	var checks bool
	var fill int
	root := &cobra.Command{
		Use:           "least [--checks] LEDGER KEY CMD [ARG...]",
		Args:          cobra.MinimumNArgs(1),
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(c *cobra.Command, args []string) error {
			if fill > 0 {
				return fillLedger(c.Context(), args[0], fill)
			}
			if len(args) < 3 {
				return fmt.Errorf("usage: %s", c.Use)
			}
			code, err := run(c.Context(), checks, args[0], args[1], args[2:])
			if err == nil {
				probe.Exit()
				os.Exit(code)
			}
			return err
		},
	}
	root.Flags().SetInterspersed(false)
	root.Flags().BoolVar(&checks, "checks", false, "keep the checks against other programs and users too")
	root.Flags().IntVar(&fill, "fill", 0, "write this many finished records and exit")
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "least:", err)
		var code exitCode
		if errors.As(err, &code) {
			os.Exit(int(code))
		}
		os.Exit(1)
	}
}

// exitCode is an error that exits with its code: 65 for another command
// under the key, 75 for a key in progress, as idem exits.
type exitCode int

func (c exitCode) Error() string { return "exit " + strconv.Itoa(int(c)) }

// ledger is least's open ledger.
type ledger struct {
	path   string
	conn   *sql.Conn
	checks bool
	id     uint32    // the ledger's identity (application_id)
	files  [2]uint64 // the inodes of the file and its -wal, as opened
}

func run(ctx context.Context, checks bool, path, key string, argv []string) (int, error) {
	// What idem inherited stays out of the command: its only descriptor
	// past stderr is the run lock, which it passes on itself.
	unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	l, err := openLedger(ctx, path, checks)
	if err != nil {
		return 0, err
	}
	probe.At("opened")
	sum := sha256.Sum256([]byte(strings.Join(argv, "\x00")))
	fingerprint := hex.EncodeToString(sum[:])

	conn := l.conn
	var token int64
	var secret []byte
	var sigs chan os.Signal
	var caught chan struct{}
reserve:
	if err := l.begin(ctx); err != nil {
		return 0, err
	}
	var status, fp string
	var code, expires sql.NullInt64
	var stdout, stderr []byte
	err = conn.QueryRowContext(ctx, `SELECT r.status, r.exit_code, r.fingerprint, r.expires_ms, o.stdout, o.stderr
		FROM records r LEFT JOIN outputs o USING (key) WHERE r.key = ?`, key).
		Scan(&status, &code, &fp, &expires, &stdout, &stderr)
	now := time.Now().UnixMilli()
	switch {
	case err == nil && (status == "succeeded" || status == "failed") && (!expires.Valid || expires.Int64 > now):
		if fp != fingerprint {
			l.rollback(ctx)
			return 0, fmt.Errorf("%s was recorded for another command: %w", key, exitCode(65))
		}
		if err := l.fenced(conn.ExecContext(ctx, `UPDATE records SET replays = replays + 1, last_replay_ms = ? WHERE key = ?`, now, key)); err != nil {
			return 0, l.rollback(ctx, err)
		}
		if err := l.commit(ctx); err != nil {
			return 0, err
		}
		probe.At("after-reserve")
		os.Stdout.Write(stdout)
		os.Stderr.Write(stderr)
		fmt.Fprintf(os.Stderr, "least: replayed %s: %s, exit %d\n", key, status, code.Int64)
		l.trimWAL(ctx)
		return int(code.Int64), nil
	case err == nil && status == "in_progress":
		l.rollback(ctx)
		return 0, fmt.Errorf("%s is in progress: %w", key, exitCode(75))
	case err == nil:
		l.rollback(ctx)
		return 0, fmt.Errorf("%s: a %s or expired record: least runs only fresh keys and replays", key, status)
	case !errors.Is(err, sql.ErrNoRows):
		return 0, l.rollback(ctx, err)
	}

	// A fresh key: the signals idem forwards are caught before the
	// reservation commits (a signal after the commit would leave the key
	// to a dead process), on a goroutine while its statements run; the
	// owner, the directory and the user are read only now, which a
	// replay never needs.
	if sigs == nil {
		sigs, caught = make(chan os.Signal, 4), make(chan struct{})
		go func() {
			for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
				if !signal.Ignored(s) {
					signal.Notify(sigs, s)
				}
			}
			signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
			close(caught)
		}()
	}
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	bootID := strings.TrimSpace(string(boot))
	var pidns unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &pidns); err != nil {
		return 0, l.rollback(ctx, err)
	}
	start, err := startTime(os.Getpid())
	if err != nil {
		return 0, l.rollback(ctx, err)
	}
	cwd, _ := os.Getwd()
	var who string
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	token, secret, err = l.nextToken(ctx, bootID)
	if err == nil && checks {
		// The output's place in outputs, where the outcome writes it,
		// read before the command runs (the page check reads only the
		// rightmost path).
		var n int64
		err = conn.QueryRowContext(ctx, `SELECT count(length(stdout)) FROM outputs WHERE key = ?`, key).Scan(&n)
	}
	if errors.Is(err, errRaiseMark) {
		l.rollback(ctx)
		if err := l.raiseMark(ctx, bootID); err != nil {
			return 0, err
		}
		goto reserve
	}
	if err != nil {
		return 0, l.rollback(ctx, err)
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO records (key, fingerprint, status, attempts, max_attempts, token,
		owner_host, owner_boot_id, owner_pidns, owner_pid, owner_start, lease_expires_ms, created_ms, run_cwd, run_user)
		VALUES (?, ?, 'in_progress', 1, 3, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		key, fingerprint, token, host, bootID, pidns.Ino, os.Getpid(), start, now+30_000, now, cwd, who); err != nil {
		return 0, l.rollback(ctx, err)
	}
	<-caught
	if err := l.commit(ctx); err != nil {
		return 0, err
	}
	probe.At("after-reserve")
	var lock *os.File
	if checks {
		if lock, err = lockKey(l.path, key); err != nil {
			return 0, err
		}
	}

	retryAfter, err := retryAfterPath(pidns.Ino)
	if err != nil {
		return 0, err
	}
	mark := hmac.New(sha256.New, secret)
	fmt.Fprintf(mark, "%s:%d:%d", key, token, os.Getpid())
	out, errOut := &tee{w: os.Stdout}, &tee{w: os.Stderr}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, out, errOut
	cmd.Env = append(os.Environ(), "IDEM_KEY="+key, "IDEM_TOKEN="+strconv.FormatInt(token, 10), "IDEM_ATTEMPT=1",
		"IDEM_MAX_ATTEMPTS=3", "IDEM_RETRY_AFTER="+retryAfter,
		fmt.Sprintf("IDEM_RUN=%d:%d:%x", token, os.Getpid(), mark.Sum(nil)))
	if lock != nil {
		cmd.ExtraFiles = []*os.File{lock} // fd 3: the run lock, held by every process of the run
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	probe.At("after-child-start")
	go func() {
		for s := range sigs {
			syscall.Kill(-cmd.Process.Pid, s.(syscall.Signal))
		}
	}()
	cmd.Wait()
	probe.At("after-child-exit")
	os.Remove(retryAfter)
	exit := cmd.ProcessState.ExitCode()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		exit = 128 + int(ws.Signal())
	}
	status, runs := "succeeded", "runs_succeeded"
	if exit != 0 {
		status, runs = "failed", "runs_failed"
	}
	ended := time.Now().UnixMilli()

	if _, err := conn.ExecContext(ctx, `PRAGMA synchronous = FULL`); err != nil {
		return 0, err
	}
	if err := l.begin(ctx); err != nil {
		return 0, err
	}
	if err := l.fenced(conn.ExecContext(ctx, `UPDATE records SET status = ?, exit_code = ?, finished_ms = ?, lease_expires_ms = 0,
		history = history || ?, `+runs+` = `+runs+` + 1 WHERE key = ? AND token = ?`,
		status, exit, ended, fmt.Sprintf("1 %d %d %d %s;", now, ended, exit, status), key, token)); err != nil {
		return 0, l.rollback(ctx, err)
	}
	if len(out.kept) > 0 || len(errOut.kept) > 0 {
		if _, err := conn.ExecContext(ctx, `INSERT INTO outputs (key, stdout, stderr) VALUES (?, ?, ?)`, key, out.kept, errOut.kept); err != nil {
			return 0, l.rollback(ctx, err)
		}
	}
	if err := l.commit(ctx); err != nil {
		return 0, err
	}
	if checks {
		// The files are still the ones opened: nobody replaced the ledger
		// or its -wal while the command ran.
		if now, err := fileIDs(l.path); err != nil || now != l.files {
			return 0, fmt.Errorf("%s: the ledger's files changed while the command ran", path)
		}
	}
	l.trimWAL(ctx)
	probe.At("after-finish")
	lock.Close()
	return exit, nil
}

// openLedger opens the ledger at path, making it when new; with checks,
// the files beside it and its pages are checked first.
func openLedger(ctx context.Context, path string, checks bool) (*ledger, error) {
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	f.Close()
	l := &ledger{path: path, checks: checks}
	if checks {
		if err := checkFiles(path); err != nil {
			return nil, err
		}
	}
	probe.At("ledger-files")
	u := url.URL{Scheme: "file", Path: path, RawQuery: "_pragma=busy_timeout(5000)&_pragma=synchronous(NORMAL)&_pragma=journal_size_limit(262144)&_txlock=immediate"}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return nil, err
	}
	if l.conn, err = db.Conn(ctx); err != nil {
		return nil, err
	}
	probe.At("ledger-connected")
	if err := l.checkHead(ctx); err != nil {
		return nil, err
	}
	if checks {
		if l.files, err = fileIDs(path); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// checkHead reads the ledger's head (with checks, and its pages' check,
// in the same statement), and makes the schema of a new file.
func (l *ledger) checkHead(ctx context.Context) error {
	conn := l.conn
	if l.checks {
		if _, err := conn.ExecContext(ctx, `PRAGMA cell_size_check = ON`); err != nil {
			return err
		}
	}
	var id, version, objects, pageSize int64
	var mode string
	head := `SELECT a.application_id, v.user_version, (SELECT count(*) FROM sqlite_schema), p.page_size, j.journal_mode`
	from := ` FROM pragma_application_id() a, pragma_user_version() v, pragma_page_size() p, pragma_journal_mode() j`
	dest := []any{&id, &version, &objects, &pageSize, &mode}
	q := head + from
	var whole string
	// Each b-tree a run writes is read down its rightmost path (both
	// tables are keyed by the key, WITHOUT ROWID).
	var reads [2]any
	if l.checks {
		q = head + `, (SELECT group_concat(quick_check, '; ') FROM pragma_quick_check('counters')),
			(SELECT max(key) FROM records), (SELECT max(key) FROM outputs)` + from
		dest = append(dest, &whole, &reads[0], &reads[1])
	}
	err := conn.QueryRowContext(ctx, q).Scan(dest...)
	if err != nil && l.checks {
		// A new file has no tables to check; any other file failed it.
		if err := conn.QueryRowContext(ctx, head+from).Scan(dest[:5]...); err != nil {
			return err
		}
		if objects > 0 {
			return errors.New("the ledger is corrupt: its pages fail the check")
		}
	} else if err != nil {
		return err
	}
	switch {
	case objects == 0 && id == 0 && version == 0:
		l.id = 0x69<<24 | rand.Uint32()&0xffffff
		var m string
		if err := conn.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&m); err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, fmt.Sprintf(schema, l.id)); err != nil {
			return err
		}
		// The identity goes into the main file at once, as idem's first
		// open puts it there: until then any ledger's -wal would pass for
		// this one's.
		if _, err := conn.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			return err
		}
		// Bind the new -wal to its file, as idem binds the -wal it makes.
		var st unix.Stat_t
		if err := unix.Stat(l.path, &st); err == nil {
			unix.Setxattr(l.path+"-wal", bindAttr, fmt.Appendf(nil, "%d:%d", st.Dev, st.Ino), 0)
		}
		return nil
	case id>>24 != 0x69 || version != 1:
		return errors.New("not a least ledger, or a newer one")
	case l.checks && whole != "ok":
		return fmt.Errorf("the ledger is corrupt (%s)", whole)
	case mode != "wal":
		return errors.New("the ledger is not in WAL mode")
	}
	l.id = uint32(id)
	if l.checks {
		fi, err := os.Stat(l.path)
		if err != nil {
			return err
		}
		if fi.Size()%pageSize != 0 {
			return fmt.Errorf("the ledger is corrupt: %d bytes", fi.Size())
		}
	}
	return nil
}

// errRaiseMark: the durable mark does not cover the next token.
var errRaiseMark = errors.New("the token mark must be raised first")

// nextToken draws a fencing token below the durable mark written during
// this boot, so that a token lost with its NORMAL commit in a power cut
// is never handed out again.
func (l *ledger) nextToken(ctx context.Context, boot string) (token int64, secret []byte, err error) {
	err = l.conn.QueryRowContext(ctx, `UPDATE counters SET value = value + 1
		WHERE name = 'token' AND value < mark AND boot = ? RETURNING value, secret`, boot).Scan(&token, &secret)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil, errRaiseMark
	}
	return token, secret, err
}

// raiseMark makes the next tokenBlock tokens durable before any is drawn,
// in a transaction of its own at synchronous=FULL: once a boot and once
// per tokenBlock tokens.
func (l *ledger) raiseMark(ctx context.Context, boot string) error {
	if _, err := l.conn.ExecContext(ctx, `PRAGMA synchronous = FULL`); err != nil {
		return err
	}
	if err := l.begin(ctx); err != nil {
		return err
	}
	if _, err := l.conn.ExecContext(ctx, `UPDATE counters SET value = max(value, mark), mark = max(value, mark) + ?, boot = ?
		WHERE name = 'token'`, tokenBlock, boot); err != nil {
		return l.rollback(ctx, err)
	}
	if err := l.commit(ctx); err != nil {
		return err
	}
	_, err := l.conn.ExecContext(ctx, `PRAGMA synchronous = NORMAL`)
	return err
}

func (l *ledger) begin(ctx context.Context) error {
	_, err := l.conn.ExecContext(ctx, `BEGIN IMMEDIATE`)
	return err
}

// commit stamps the ledger's identity (with checks) and commits.
func (l *ledger) commit(ctx context.Context) error {
	if l.checks {
		if _, err := l.conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA application_id = %d`, l.id)); err != nil {
			return l.rollback(ctx, err)
		}
	}
	_, err := l.conn.ExecContext(ctx, `COMMIT`)
	return err
}

// rollback rolls the transaction back and returns the first of errs.
func (l *ledger) rollback(ctx context.Context, errs ...error) error {
	l.conn.ExecContext(ctx, `ROLLBACK`)
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// fenced is a fenced write's result: one row, or the lease was lost.
func (l *ledger) fenced(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("the lease was lost (%d rows, %v)", n, err)
	}
	return nil
}

// trimWAL truncates a WAL past 256 KiB, as idem and the floor do at the
// end of a run or a replay: a process that opens the ledger alone reads
// the whole WAL.
func (l *ledger) trimWAL(ctx context.Context) {
	if fi, err := os.Stat(l.path + "-wal"); err == nil && fi.Size() >= 256<<10 {
		l.conn.ExecContext(ctx, `PRAGMA busy_timeout = 0`)
		l.conn.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
	}
}

// checkFiles checks the files beside the ledger before SQLite opens them:
// each is this user's regular file with one link; the -wal's committed
// page-1 frames carry the main file's identity, its page size is the
// main file's, and its binding attribute, where set, names the main file.
func checkFiles(path string) error {
	euid := os.Geteuid()
	var main unix.Stat_t
	for i, name := range []string{path, path + "-wal", path + "-shm"} {
		var st unix.Stat_t
		if err := unix.Lstat(name, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return err
		}
		if int(st.Uid) != euid || st.Nlink != 1 || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("%s: not this user's own file", name)
		}
		if i == 0 {
			main = st
		}
	}
	var hdr [108]byte // the header and page 1's b-tree header
	if err := readHeader(path, hdr[:]); err != nil {
		return err
	}
	fd, err := unix.Open(path+"-wal", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), path+"-wal")
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	walPage, ids := walIdentities(f, fi.Size())
	if len(ids) == 0 {
		return nil
	}
	be := binary.BigEndian
	id, page := be.Uint32(hdr[68:]), uint32(be.Uint16(hdr[16:]))
	if page == 1 {
		page = 65536
	}
	// A file whose schema is still in its -wal (page 1 on the disk is an
	// empty leaf, without an identity) is becoming the ledger its -wal
	// names.
	becoming := id == 0 && hdr[100] == 0x0d && hdr[103] == 0 && hdr[104] == 0
	foreign := func(w uint32) bool { return w != id && !(becoming && w>>24 == 0x69) }
	if main.Size == 0 || slices.ContainsFunc(ids, foreign) || walPage != page {
		return fmt.Errorf("%s-wal: another database's", path)
	}
	var bound [64]byte
	n, err := unix.Getxattr(path+"-wal", bindAttr, bound[:])
	if err == nil && string(bound[:n]) != fmt.Sprintf("%d:%d", main.Dev, main.Ino) {
		return fmt.Errorf("%s-wal: bound to another file", path)
	}
	return nil
}

// readHeader reads the start of the main file (zeros past its end).
func readHeader(path string, hdr []byte) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Pread(fd, hdr, 0)
	return err
}

// walIdentities reads the -wal as SQLite's recovery would, a frame at a
// time, checking salts and checksums, and returns its page size and the
// application_ids in the page-1 frames of its committed transactions.
func walIdentities(r io.ReaderAt, size int64) (pageSize uint32, ids []uint32) {
	be := binary.BigEndian
	var hdr [32]byte
	if size < 32 {
		return 0, nil
	}
	if _, err := r.ReadAt(hdr[:], 0); err != nil || be.Uint32(hdr[:])&^1 != 0x377f0682 {
		return 0, nil
	}
	s1, s2 := walSum(hdr[:24], 0, 0)
	pageSize = be.Uint32(hdr[8:])
	if s1 != be.Uint32(hdr[24:]) || s2 != be.Uint32(hdr[28:]) || pageSize < 512 || pageSize > 65536 {
		return 0, nil
	}
	f := make([]byte, 24+int(pageSize))
	var pending []uint32
	for off := int64(32); off+int64(len(f)) <= size; off += int64(len(f)) {
		if _, err := r.ReadAt(f, off); err != nil || !bytes.Equal(f[8:16], hdr[16:24]) {
			break
		}
		s1, s2 = walSum(f[:8], s1, s2)
		s1, s2 = walSum(f[24:], s1, s2)
		if s1 != be.Uint32(f[16:]) || s2 != be.Uint32(f[20:]) {
			break
		}
		if be.Uint32(f) == 1 {
			pending = append(pending, be.Uint32(f[24+68:]))
		}
		if be.Uint32(f[4:]) != 0 {
			ids, pending = append(ids, pending...), nil
		}
	}
	return pageSize, ids
}

// walSum continues the -wal's checksum over b (little-endian words, as
// SQLite writes them on x86 and arm64).
func walSum(b []byte, s1, s2 uint32) (uint32, uint32) {
	for ; len(b) >= 8; b = b[8:] {
		s1 += binary.LittleEndian.Uint32(b) + s2
		s2 += binary.LittleEndian.Uint32(b[4:]) + s1
	}
	return s1, s2
}

// fileIDs is the inodes of the ledger and its -wal.
func fileIDs(path string) (ids [2]uint64, err error) {
	for i, name := range []string{path, path + "-wal"} {
		var st unix.Stat_t
		if err := unix.Stat(name, &st); err != nil {
			return ids, err
		}
		ids[i] = st.Ino
	}
	return ids, nil
}

// lockKey takes the key's run lock as idem does: an OFD write lock on
// one byte of LEDGER.runlock chosen by the key, on a description of its
// own (opened again through /proc), which the command inherits.
func lockKey(path, key string) (*os.File, error) {
	fd, err := unix.Open(path+".runlock", unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: int64(h.Sum64() >> 2), Len: 1}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// retryAfterPath names the run's IDEM_RETRY_AFTER file in the user's
// private directory, which it makes (and checks) but does not fill.
func retryAfterPath(ns uint64) (string, error) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("least-%d", os.Geteuid()))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil || int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 {
		return "", fmt.Errorf("%s: not a private directory of this user's", dir)
	}
	return filepath.Join(dir, fmt.Sprintf("%d-%d-%x", ns, os.Getpid(), rand.Uint64())), nil
}

// tee passes a stream through and keeps its first maxOutput bytes; a
// reader gone from the other end stops the passing, not the keeping.
type tee struct {
	w    io.Writer
	gone bool
	kept []byte
}

func (t *tee) Write(p []byte) (int, error) {
	if !t.gone {
		if _, err := t.w.Write(p); err != nil {
			t.gone = true
		}
	}
	t.kept = append(t.kept, p[:min(len(p), maxOutput-len(t.kept))]...)
	return len(p), nil
}

// startTime is a process's start time (field 22 of /proc/PID/stat), the
// guard of an owner's identity against a reused PID.
func startTime(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 20 {
		return 0, errors.New("/proc/PID/stat: short")
	}
	return strconv.ParseInt(f[19], 10, 64)
}

// fillLedger writes n finished records with a line of output each, in
// one transaction, so that a replay is measured among them.
func fillLedger(ctx context.Context, path string, n int) error {
	l, err := openLedger(ctx, path, false)
	if err != nil {
		return err
	}
	if err := l.begin(ctx); err != nil {
		return err
	}
	now := time.Now().UnixMilli()
	for i := range n {
		key := fmt.Sprintf("fill-%07d", i)
		if _, err := l.conn.ExecContext(ctx, `INSERT INTO records (key, fingerprint, status, attempts, max_attempts, exit_code,
			token, owner_host, owner_boot_id, owner_pidns, owner_pid, owner_start, lease_expires_ms, created_ms, finished_ms,
			run_cwd, run_user, history, runs_succeeded) VALUES (?, '', 'succeeded', 1, 3, 0, 0, '', '', 0, 0, 0, 0, ?, ?, '', '', '', 1)`,
			key, now, now); err != nil {
			return l.rollback(ctx, err)
		}
		if _, err := l.conn.ExecContext(ctx, `INSERT INTO outputs (key, stdout) VALUES (?, ?)`, key, []byte(key+"\n")); err != nil {
			return l.rollback(ctx, err)
		}
	}
	return l.commit(ctx)
}
