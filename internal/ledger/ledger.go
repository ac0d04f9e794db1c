// Package ledger is the contract of idem's store: the record types, the
// Ledger interface every backend keeps, its errors, and the pure decisions
// the backends share (Decide and Execute, Record.Live, the schema
// versions' rules). It imports no database driver: the backends are the
// packages sqlite (one file, one host) and postgres (a fleet's shared
// database), and each runs the conformance suite in ledgertest. It runs
// nothing either: liveness of another process is decided by the caller
// through ReserveRequest.OwnerDead.
//
// # Where the SQL lives
//
// Each backend owns its dialect's SQL: its schema, migrations and
// statements are in its own package, next to the Steps it gives Execute.
// This package holds only the fragments written the same in both dialects
// (CounterColumns, BumpSQL, SumCountersSQL), so that the backends cannot
// disagree on the counters' columns or on how an outcome bumps them. No
// SQL lives outside these three packages.
//
// # Schema changes
//
// Every change to a backend's schema is one numbered migration, appended
// to that backend's list in merge order and never edited once released:
// its number is its place in the list, so of two branches that each add
// one, the one merged second renumbers its migration (and its Compat, if
// that names itself) before it lands.
// A ledger stores two numbers: its write version (the last migration
// applied) and its compatibility version (the oldest schema version whose
// idem can still read and write it correctly). A migration is additive
// when an idem that knows only the versions before it keeps working: new
// tables, indexes, and columns that are nullable or have a default, which
// older writers leave at that default. An additive migration keeps the
// compatibility version; any other migration raises it to its own number.
//
// An idem opens a ledger whose compatibility version it knows, even when
// the write version is ahead of it (on a fleet, the first upgraded host
// must not lock every other host out), and refuses, without changing
// anything, one whose compatibility version is newer than what it knows.
// A ledger behind this idem is migrated forward, all pending migrations in
// one transaction, by an idem that opens it to write; an open for reading
// only never changes the schema. PlanSchema states these rules once; the
// backends store the two numbers as their dialect allows.
package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Status is the visible state of a record.
type Status string

// The four visible statuses. Failed is final.
const (
	StatusInProgress Status = "in_progress"
	StatusSucceeded  Status = "succeeded"
	StatusFailed     Status = "failed"
	StatusRetryable  Status = "retryable"
)

// Valid reports whether s is one of the four statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusInProgress, StatusSucceeded, StatusFailed, StatusRetryable:
		return true
	}
	return false
}

// Attempt classes recorded in the history.
const (
	ClassSuccess     = "success"
	ClassTransient   = "transient"
	ClassPermanent   = "permanent"
	ClassAbandoned   = "abandoned"   // owner died or lost its lease; counts as transient code 75
	ClassInterrupted = "interrupted" // idem was signalled
	ClassTimeout     = "timeout"     // idem stopped it at --timeout or --deadline
)

// AbandonedExitCode is the code recorded for an attempt whose owner vanished.
const AbandonedExitCode = 75

// Owner identifies the idem process holding an in_progress record, and the
// process group of the child it runs.
type Owner struct {
	Host       string
	BootID     string
	PIDNS      uint64 // inode of /proc/self/ns/pid
	PID        int
	StartTime  uint64 // field 22 of /proc/PID/stat
	ChildPGID  int    // 0 until the child started
	ChildStart uint64 // start time of the group leader
}

// Record is one key's entry in the ledger.
type Record struct {
	Key string
	// Seq is the record's place in insertion order: it breaks ties of
	// outcome time in List's order.
	Seq         int64
	Fingerprint string
	Command     []string
	Status      Status
	Attempts    int
	MaxAttempts int
	ExitCode    int  // last ended attempt's code, meaningful when HasExit
	HasExit     bool //
	ExitSource  string
	Token       int64
	Owner       Owner
	LeaseExpiry time.Time
	Created     time.Time // first reservation of this record
	Started     time.Time // reservation by the current or last invocation
	Updated     time.Time
	Finished    time.Time // outcome; zero while in progress
	Duration    time.Duration
	TTL         time.Duration
	Expires     time.Time // zero: never
	Replays     int64
	LastReplay  time.Time

	OutputStored    bool
	Stdout, Stderr  []byte // filled only where a method says so
	StdoutTruncated bool
	StderrTruncated bool

	// Class is the class of the attempt that set ExitCode ("" before any
	// ended, and on records written before it was kept).
	Class string
	// Reason is the last non-empty line of that attempt's stderr, cut to
	// ReasonMax bytes ("" when it printed none, or with --no-output).
	Reason string
	// Cwd and User are the working directory and the user name of the
	// invocation that reserved the record last ("" when unknown).
	Cwd, User string
	// Counters are the record's share of the ledger's counters.
	Counters Counters
}

// Expired reports whether r counts as absent at now.
func (r *Record) Expired(now time.Time) bool {
	return !r.Expires.IsZero() && !now.Before(r.Expires)
}

// Live reports whether r is held by a live owner at now: in progress, its
// lease not expired, and its owner not known dead. ownerDead reports a
// same-host owner gone; nil: only the lease's expiry frees a record.
func (r *Record) Live(now time.Time, ownerDead func(Owner) bool) bool {
	return r.Status == StatusInProgress && now.Before(r.LeaseExpiry) && (ownerDead == nil || !ownerDead(r.Owner))
}

// Snapshot returns the part of r a reservation changes, for Release.
func (r *Record) Snapshot() *Snapshot {
	return &Snapshot{Status: r.Status, Attempts: r.Attempts, MaxAttempts: r.MaxAttempts,
		ExitCode: r.ExitCode, HasExit: r.HasExit, Finished: r.Finished, Expires: r.Expires}
}

// OutcomeTime is when the record reached its outcome, or its creation while
// it has none yet: the time purge --older-than and inspect measure from.
func (r *Record) OutcomeTime() time.Time {
	if r.Finished.IsZero() {
		return r.Created
	}
	return r.Finished
}

// Attempt is one entry of a record's history.
type Attempt struct {
	N        int
	Token    int64
	Host     string
	PID      int
	Started  time.Time
	Ended    time.Time // zero while running
	ExitCode int
	HasExit  bool
	Class    string
	Delay    time.Duration // backoff before the next attempt
	// StderrTail is the end of the attempt's stderr, at most TailMax bytes
	// (nil: none stored: --no-output, or an attempt that is running or
	// was abandoned).
	StderrTail []byte
}

// Snapshot is the part of a record a reservation changes; Release puts it back.
type Snapshot struct {
	Status      Status
	Attempts    int
	MaxAttempts int
	ExitCode    int
	HasExit     bool
	Finished    time.Time
	Expires     time.Time
}

// ReserveRequest asks for the right to run a key.
type ReserveRequest struct {
	Key         string
	Fingerprint string
	Command     []string
	MaxAttempts int
	RerunFailed bool // a final failed record runs again with a fresh budget
	Owner       Owner
	Lease       time.Duration
	// OwnerDead reports whether the holder of an in_progress record is known
	// to be gone (same host, process dead). Nil: only lease expiry frees a row.
	OwnerDead func(Owner) bool
	// Cwd and User say where and as whom the command runs, so that a person
	// can run it again by hand; a reservation that runs records them.
	Cwd, User string
	// Identify, when set, gives Owner, Cwd and User instead (see Who).
	// Finding the owner reads /proc, which a replay would pay for
	// nothing: a backend asks only when it may write them.
	Identify func() (Owner, string, string)
}

// Who is the owner, the directory and the user the reservation records:
// Identify's answer when it is set, else the request's own fields. A
// backend calls it where it may write them (a new owner, or a token,
// which is drawn under the owner's boot), never for the replay of a
// recorded outcome. SQLite calls it once it knows it will; PostgreSQL
// also for the claim of a new key that it tries before it reads the
// record, which a busy key or another command's refuses.
func (r *ReserveRequest) Who() (o Owner, cwd, user string) {
	if r.Identify != nil {
		return r.Identify()
	}
	return r.Owner, r.Cwd, r.User
}

// Outcome says what Reserve decided.
type Outcome int

// Reserve outcomes.
const (
	// Reserved: the caller owns the key and starts attempt Reservation.Attempt.
	Reserved Outcome = iota + 1
	// Replay: the record is final; replay Reservation.Record (outputs filled).
	Replay
	// Busy: a live owner holds the key; Reservation.Record says who.
	Busy
)

// Reservation is Reserve's answer.
type Reservation struct {
	Outcome   Outcome
	Token     int64
	Attempt   int   // attempt number now starting (Reserved)
	AttemptID int64 // history row of that attempt
	Record    *Record
	// Prev is the record's state before this reservation (nil for a new
	// key), for Release when the command could not be started.
	Prev *Snapshot
	// Abandoned is the previous owner whose lease this reservation took
	// over; its child's process group must be stopped before anything runs.
	Abandoned *Owner
	// Expired: the key had a record past its TTL, which counted as absent
	// and was removed; processes of its runs may still run, and must be
	// stopped before anything runs, as in a takeover.
	Expired bool
}

// FinishRequest records an invocation's outcome.
type FinishRequest struct {
	Key             string
	Token           int64
	AttemptID       int64
	Status          Status // succeeded, failed or retryable
	ExitCode        int
	ExitSource      string // "child" or "idem"
	Class           string
	Duration        time.Duration
	TTL             time.Duration
	OutputStored    bool
	Stdout, Stderr  []byte
	StdoutTruncated bool
	StderrTruncated bool
	// StderrTail is the end of the last attempt's stderr (see Tail); it
	// is stored with the attempt, and its last line as Record.Reason,
	// unless OutputStored is false.
	StderrTail []byte
}

// AttemptEnd is what EndAttempt records of a transient attempt before a
// backoff.
type AttemptEnd struct {
	Key       string
	Token     int64
	AttemptID int64
	ExitCode  int
	Class     string
	Delay     time.Duration
	// StderrTail is the end of the attempt's stderr (nil with --no-output).
	StderrTail []byte
}

// Output is what Finish stores as stdout and stderr: nothing (NULL) with
// --no-output, else the bytes, empty rather than NULL when there were none.
func (r FinishRequest) Output() (stdout, stderr []byte) {
	if !r.OutputStored {
		return nil, nil
	}
	return NonNil(r.Stdout), NonNil(r.Stderr)
}

// Tail is the stderr tail Finish stores: nil with --no-output, else the
// end of StderrTail, or of Stderr when StderrTail is nil (empty, not nil,
// when the command printed nothing).
func (r FinishRequest) Tail() []byte {
	if !r.OutputStored {
		return nil
	}
	t := r.StderrTail
	if t == nil {
		t = r.Stderr // the end of what was captured
	}
	return NonNil(Tail(t))
}

// Landed reports whether rec, read afresh (with err) after this Finish
// failed with a *StoreError, shows its outcome committed all the same:
// after a failed commit the state is unknown, and only what a fresh read
// shows counts. A read that failed (err != nil) shows nothing.
func (r FinishRequest) Landed(rec *Record, err error) bool {
	return err == nil && rec.Token == r.Token && rec.Status == r.Status && !rec.Finished.IsZero()
}

// NonNil returns b, or an empty slice for nil: a stored empty output is
// empty, not NULL.
func NonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Ledger is the contract every backend keeps. Writes by an owner are fenced
// by token: a write that matches no row returns ErrLeaseLost.
type Ledger interface {
	// Reserve decides, in one transaction, whether the caller runs, replays
	// or must wait. A different fingerprint returns *MismatchError.
	Reserve(ctx context.Context, req ReserveRequest) (*Reservation, error)
	// SetChild records the started child's process group.
	SetChild(ctx context.Context, key string, token int64, pgid int, start uint64) error
	// Renew extends the lease to now+lease.
	Renew(ctx context.Context, key string, token int64, lease time.Duration) error
	// EndAttempt records a transient attempt before a backoff.
	EndAttempt(ctx context.Context, end AttemptEnd) error
	// StartAttempt starts the next attempt and renews the lease.
	StartAttempt(ctx context.Context, key string, token int64, lease time.Duration) (n int, attemptID int64, err error)
	// Finish records the outcome durably.
	Finish(ctx context.Context, req FinishRequest) error
	// Release undoes an attempt that never started: the reservation is
	// removed (prev nil) or the previous state restored.
	Release(ctx context.Context, key string, token, attemptID int64, prev *Snapshot) error
	// Get returns a record with its outputs, or ErrNotFound.
	Get(ctx context.Context, key string) (*Record, error)
	// History returns a record's attempts, oldest first.
	History(ctx context.Context, key string) ([]Attempt, error)
	// List returns records without their outputs, newest outcome first
	// (an in_progress record counts from its creation). Expired records
	// are included: Record.Expired tells them apart.
	List(ctx context.Context, f ListFilter) ([]*Record, error)
	// Each calls fn with the records List would return, in its order, as
	// it reads them: in pages of f.PageSize records, each read by a short
	// statement of its own, so that memory stays bounded and no read
	// stays open while fn runs. It stops at fn's first error and returns
	// it.
	Each(ctx context.Context, f ListFilter, fn func(*Record) error) error
	// Metrics reads the ledger's gauges and counters (see Metrics) in
	// constant memory.
	Metrics(ctx context.Context, req MetricsRequest) (*Metrics, error)
	// Purge removes the records req selects, with their attempt history,
	// in chunks of short write transactions. In_progress records, lease
	// expired or not, are kept unless req.Force. A selector that selects
	// nothing returns ErrEmptySelector.
	Purge(ctx context.Context, req PurgeRequest) (*PurgeResult, error)
	// Vacuum compacts the store and returns its size before and after.
	Vacuum(ctx context.Context) (*VacuumResult, error)
	// Describe names the ledger for people (a path, or a DSN without secrets).
	Describe() string
	Close() error
}

// Identity returns l's identity, or "" when l has none: a short string
// that every process using the same ledger on a host gets alike and that
// two ledgers in use on one host never share. Fencing tokens are counted
// per ledger, so a run is named by the ledger's identity, its key and its
// token. A backend has one by a method Identity() string. It is derived,
// not stored, so that it needs no schema change: SQLite from the file's
// device and inode, PostgreSQL from the time its schema was created.
func Identity(l Ledger) string {
	if i, ok := l.(interface{ Identity() string }); ok {
		return i.Identity()
	}
	return ""
}

// MakeIdentity hashes a backend's name and numbers into an identity.
func MakeIdentity(backend string, nums ...uint64) string {
	h := sha256.New()
	h.Write([]byte(backend))
	var b [8]byte
	for _, n := range nums {
		binary.BigEndian.PutUint64(b[:], n)
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Options says how a backend's opener opens a ledger.
type Options struct {
	// ReadOnly opens an existing ledger for reading only, for commands that
	// only look (inspect, purge --dry-run, completion, metrics): nothing is
	// created, initialised, migrated or tightened, and a SQLite file needs
	// only read permission. A ledger that does not exist (a missing or
	// empty file, a database without the ledger's schema) is ErrNoLedger.
	ReadOnly bool
	// NoMkdir refuses a ledger whose directory is missing instead of
	// creating it: a path the user named (a typo must not start a fresh,
	// empty ledger, under which every key runs again). With ReadOnly or
	// Existing, such a ledger is refused too, not ErrNoLedger: no run
	// would ever create it, so it is no ledger "not created yet".
	NoMkdir bool
	// Existing opens to write only a ledger that exists: one that does not
	// (a missing or empty file, a database without the ledger's schema) is
	// ErrNoLedger and nothing is created, for commands that only remove
	// records (purge). An older schema is still migrated.
	Existing bool
}

// ErrNoLedger is returned, wrapped in a *StoreError, by a read-only open
// of a ledger that does not exist yet: nothing was ever recorded there.
var ErrNoLedger = errors.New("no ledger there: nothing was ever recorded")

// CloseAtExit ends the use of l by a process that exits right after, and
// returns the error of closing it. A backend that has a cheaper way to end
// at exit says so by a method CloseAtExit() error (SQLite leaves its file
// open: exiting releases its locks); every other backend is closed.
func CloseAtExit(l Ledger) error {
	if c, ok := l.(interface{ CloseAtExit() error }); ok {
		return c.CloseAtExit()
	}
	return l.Close()
}

// ListFilter selects records for List. Zero fields do not filter.
type ListFilter struct {
	Statuses []Status // any of these
	Prefix   string   // keys that start with Prefix
	// Since keeps records whose outcome (creation while in progress) is at
	// or after it.
	Since time.Time
	Limit int // at most this many; 0: no limit
	// PageSize is how many records Each reads per statement; 0:
	// DefaultPageSize.
	PageSize int
}

// DefaultPageSize is how many records Each reads per statement.
const DefaultPageSize = 1000

// Pages is f.PageSize, or DefaultPageSize when it is not set.
func (f ListFilter) Pages() int {
	if f.PageSize <= 0 {
		return DefaultPageSize
	}
	return f.PageSize
}

// Selector chooses records for Purge: those that match every condition it
// sets. All must be set to select every record; a Selector that sets
// nothing selects nothing.
type Selector struct {
	Keys     []string
	Statuses []Status
	Prefix   string
	// OlderThan keeps records whose outcome (creation while in progress) is
	// more than OlderThan before the ledger's now; 0: any age.
	OlderThan time.Duration
	Expired   bool // only records past their TTL
	All       bool
}

// Empty reports whether s selects nothing.
func (s Selector) Empty() bool {
	return !s.All && len(s.Keys) == 0 && len(s.Statuses) == 0 && s.Prefix == "" && s.OlderThan <= 0 && !s.Expired
}

// DefaultPurgeChunk is how many records Purge removes per transaction.
const DefaultPurgeChunk = 5000

// PurgeRequest asks Purge to remove the records Selector chooses. Records
// reserved after the purge began are left alone.
type PurgeRequest struct {
	Selector
	// Force also removes in_progress records, expired lease or not (their
	// processes may still run); their owners lose the lease.
	Force  bool
	DryRun bool // remove nothing; report what would go
	Chunk  int  // records per write transaction; 0: DefaultPurgeChunk
}

// ChunkSize is r.Chunk, or DefaultPurgeChunk when it is not set.
func (r PurgeRequest) ChunkSize() int {
	if r.Chunk <= 0 {
		return DefaultPurgeChunk
	}
	return r.Chunk
}

// PurgeResult says what Purge did.
type PurgeResult struct {
	// Removed counts the records removed (with DryRun: that would be).
	Removed int
	// Keys lists, with DryRun only, the keys that would be removed, in key
	// order.
	Keys []string
	// Live lists the in_progress records the selector matched (lease
	// expired or not: their processes may still run): kept without Force,
	// removed (and counted in Removed) with it.
	Live []*Record
	// Missing lists the Selector.Keys that have no record.
	Missing []string
}

// VacuumResult gives the store's size in bytes around a Vacuum.
type VacuumResult struct {
	Before, After int64
}

// ErrEmptySelector is returned by Purge for a Selector that sets nothing.
var ErrEmptySelector = errors.New("purge selector selects nothing: name keys, set a condition or All")

// Errors of the ledger contract.
var (
	// ErrFilesChanged: a write committed, but into files that are no
	// longer the ledger (deleted, moved or replaced while in use); no
	// later run sees it. Retrying would write there again.
	ErrFilesChanged = errors.New("the ledger's files were deleted, moved or replaced while this run used them: what it wrote went to a file that is no longer the ledger")
	ErrNotFound     = errors.New("no such key")
	ErrLeaseLost    = errors.New("lease lost: another run took over this key")
)

// MismatchError is returned when a key is reused with another fingerprint.
type MismatchError struct {
	Record *Record
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("key %q was recorded with a different command or payload", e.Record.Key)
}

// LocksRefusedHint is the hint for a file system that refuses the locks a
// ledger file and its run lock need (fcntl fails with ENOLCK, as on an NFS
// mount without a lock manager).
const LocksRefusedHint = "keep the ledger on a local file system: network file systems (NFS, SMB) and some FUSE file systems do not support the locks idem needs; a fleet shares a PostgreSQL ledger"

// StoreError is a failure of the store itself (cannot open, read or write).
type StoreError struct {
	Op   string // what idem was doing, e.g. "open", "reserve"
	Path string
	Err  error
	// Hint, when set, says what the user can do.
	Hint string
}

func (e *StoreError) Error() string {
	if e.Path != "" {
		return fmt.Sprintf("ledger %s: %s: %v", e.Path, e.Op, e.Err)
	}
	return fmt.Sprintf("ledger: %s: %v", e.Op, e.Err)
}

func (e *StoreError) Unwrap() error { return e.Err }

// CheckResult is what a ledger's check of its own pages found (idem
// check): the pages it read, and the problems, one line each.
type CheckResult struct {
	Pages    int64
	Problems []string
}
