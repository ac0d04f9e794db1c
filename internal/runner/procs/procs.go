// Package procs finds and stops the processes of a key's runs on this
// host. Every process of a run carries the run's identity in its
// environment (variable Env, inherited by every descendant, also one that
// leaves its process group or session) and inherits an open file
// description that holds the key's run lock (Lock). A taker finds an older
// run's processes by that identity (Finder), and learns from the lock that
// processes it cannot see (another PID namespace) still run.
//
// The platform parts sit behind build tags: Linux scans /proc and uses OFD
// locks; elsewhere (and with the build tag idem_noprocs) Find finds
// nothing and the lock is always free, so only the lease protects a key.
package procs

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// Env is the environment variable that carries the identities of the runs
// a process belongs to: space-separated Run strings, the innermost last
// (an idem started by a run's command adds its own).
const Env = "IDEM_RUN"

// Run identifies one attempt of one invocation of a key: tokens are counted
// per ledger, so the ledger's identity is part of it.
type Run struct {
	Ledger  string // the ledger's identity (ledger.Identity): no '/' or space
	Key     string
	Token   int64
	Attempt int
	// Tag proves the run is the ledger's (Sign): "" for a ledger without
	// a secret.
	Tag string
}

// String is the form carried in Env: LEDGER/TOKEN/ATTEMPT/KEY, the
// ledger's identity followed by .TAG when tagged (neither holds a '.', a
// '/' or a space; a key holds no space).
func (r Run) String() string {
	if r.Tag != "" {
		return r.Ledger + "." + r.Tag + r.unsigned()[len(r.Ledger):]
	}
	return r.unsigned()
}

func (r Run) unsigned() string {
	return r.Ledger + "/" + strconv.FormatInt(r.Token, 10) + "/" + strconv.Itoa(r.Attempt) + "/" + r.Key
}

// ParseRun reads a Run from its String form.
func ParseRun(s string) (Run, bool) {
	parts := strings.SplitN(s, "/", 4)
	if len(parts) != 4 || parts[0] == "" || parts[3] == "" {
		return Run{}, false
	}
	id, tag, _ := strings.Cut(parts[0], ".")
	tok, err1 := strconv.ParseInt(parts[1], 10, 64)
	att, err2 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil {
		return Run{}, false
	}
	return Run{Ledger: id, Tag: tag, Token: tok, Attempt: att, Key: parts[3]}, true
}

// Sign is r tagged with the ledger's secret (ledger.RunGuard): an HMAC
// of its identity, which nobody who cannot read the ledger can make,
// whereas the ledger's identity is a hash of its device and inode that
// anyone who can stat the file computes. No secret: r untagged.
func (r Run) Sign(secret []byte) Run {
	r.Tag = ""
	if len(secret) > 0 {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(r.unsigned()))
		r.Tag = hex.EncodeToString(m.Sum(nil)[:16])
	}
	return r
}

// Signed reports whether r carries the tag secret gives it (any run
// passes for a ledger without a secret).
func (r Run) Signed(secret []byte) bool {
	return len(secret) == 0 || hmac.Equal([]byte(r.Tag), []byte(r.Sign(secret).Tag))
}

// Before reports whether r is an earlier run of the same key of the same
// ledger as o: a smaller token (an earlier invocation), or the same token
// and an earlier attempt.
func (r Run) Before(o Run) bool {
	if r.Ledger != o.Ledger || r.Key != o.Key {

		return false
	}
	return r.Token < o.Token || r.Token == o.Token && r.Attempt < o.Attempt
}

// EnvValue is the value of Env for a process of run r whose parent's
// environment held inherited (the runs it already belonged to).
func EnvValue(inherited string, r Run) string {
	if inherited = strings.TrimSpace(inherited); inherited != "" {
		return inherited + " " + r.String()
	}
	return r.String()
}

// runsIn parses an Env value; entries that do not parse are skipped.
func runsIn(v string) []Run {
	var runs []Run
	for _, f := range strings.Fields(v) {
		if r, ok := ParseRun(f); ok {
			runs = append(runs, r)
		}
	}
	return runs
}

// Process is a process on this host: its pid and its start time (clock
// ticks since boot on Linux), which together never name another process.
type Process struct {
	PID   int
	Start uint64
	// Run is the earlier run it was found by (zero for a process named by
	// the ledger, such as an abandoned idem).
	Run Run
}

// Finder finds and signals a key's processes on this host.
type Finder interface {
	// Find returns the living processes (zombies excluded) of every run
	// of before's ledger and key that is Before it and carries the tag
	// secret gives it (Run.Signed), the caller excluded.
	// It returns what it could read; an error says the search was
	// incomplete.
	Find(before Run, secret []byte) ([]Process, error)
	// Runs is Find for every run of the ledger whose identity is
	// ledgerID (Process.Run: the first such run its Env names).
	Runs(ledgerID string, secret []byte) ([]Process, error)
	// Signal sends sig to p unless p is gone or its pid now names
	// another process; alive reports whether p still ran.
	Signal(p Process, sig syscall.Signal) (alive bool)
	// Alive reports whether p still runs (a zombie does not).
	Alive(p Process) bool
	// Owner returns the process that is pid in the PID namespace whose
	// inode is pidns and that started at start (an idem named by the
	// ledger), when it runs and this process can see it: in its own
	// namespace, here (the caller's Host.PIDNS, read once), or in one
	// below it (a container seen from its host).
	Owner(here, pidns uint64, pid int, start uint64) (Process, bool)
	// Holding returns the processes, the caller excluded, that hold key's
	// byte of the run lock file dev/ino (Lock) through their own copy of
	// a description: what is left of a run after idem closed its copy.
	Holding(dev, ino uint64, key string) ([]Process, error)
	// Reopen opens the run lock file dev/ino, whose path is path no
	// longer, through a process of a trusted uid that has it open as
	// path, or as a file that carries the ledger's mark (LockFile.Mark;
	// "": none); nil, nil when none has.
	Reopen(path string, dev, ino uint64, mark string) (*LockFile, error)
}

// ForeignLockError is returned by Lock for a lock file that belongs to
// another user, is no regular file, or is a symlink (UID -1).
type ForeignLockError struct {
	Path string
	UID  int
	// Links, when over 1, is how many names the file has: a hard link
	// another user made to a file of its choosing.
	Links uint64
}

func (e *ForeignLockError) Error() string {
	if e.Links > 1 {
		return fmt.Sprintf("the run lock %s has %d names (hard links): another name leads to the same file", e.Path, e.Links)
	}
	if e.UID < 0 {
		return fmt.Sprintf("the run lock %s is a symlink or no regular file", e.Path)
	}
	return fmt.Sprintf("the run lock %s belongs to uid %d, not to this user or the ledger's owner", e.Path, e.UID)
}

// keyOffset is the byte of the lock file that stands for key: FNV-1a, in
// [0, 2^62) so that offset+1 never overflows. Two keys that share a byte
// only make each other busy, never overlap.
func keyOffset(key string) int64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return int64(h >> 2)
}
