package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

func reserveOn(t *testing.T, l ledger.Ledger, key, boot string) *ledger.Reservation {
	t.Helper()
	res, err := l.Reserve(context.Background(), ledger.ReserveRequest{Key: key, Fingerprint: "fp", Command: []string{"true"},
		MaxAttempts: 3, Owner: ledger.Owner{Host: "h", BootID: boot, PID: os.Getpid()}, Lease: time.Minute})
	if err != nil || res.Outcome != ledger.Reserved {
		t.Fatalf("Reserve(%s): %+v, %v", key, res, err)
	}
	return res
}

// copyFiles copies the ledger's main file and -wal as they are now into a
// new directory: the disk as a power cut at this moment would leave it, when
// every commit so far was synced.
func copyFiles(t *testing.T, path string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "ledger.db")
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sqlite.BindWAL(dst) // a copy without the binding would be refused
	return dst
}

// TestSQLiteTokensSurvivePowerCut: reservations commit with
// synchronous=NORMAL, so a power cut may lose them, counter update and
// all, after their tokens were handed to commands. Simulated: the files are
// copied right after an outcome's FULL commit (all before it is on disk),
// more reservations follow (their commits not synced), and the copy is
// what the disk holds after the cut. The first reservation after the
// reboot gets a token above every token handed out.
func TestSQLiteTokensSurvivePowerCut(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	first := reserveOn(t, l, "evt:before-cut-0", "boot-a")
	if err := l.Finish(ctx, ledger.FinishRequest{Key: "evt:before-cut-0", Token: first.Token, AttemptID: first.AttemptID,
		Status: ledger.StatusSucceeded, ExitSource: "child", Class: ledger.ClassSuccess, OutputStored: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Fatalf("no -wal after a commit: %v", err)
	}
	atFull := copyFiles(t, path) // the last FULL commit: the outcome

	var handed int64
	for _, key := range []string{"evt:lost-1", "evt:lost-2", "evt:lost-3", "evt:lost-4"} {
		handed = max(handed, reserveOn(t, l, key, "boot-a").Token)
	}

	// Without the reboot noticed, the counter would have gone back: the
	// simulation does lose the reservations.
	same := copyFiles(t, atFull)
	ls, err := sqlite.Open(ctx, same)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Get(ctx, "evt:lost-1"); err == nil {
		t.Fatalf("the simulated power cut kept a reservation made after the last FULL commit")
	}
	ls.Close()

	after, err := sqlite.Open(ctx, atFull)
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	for i, key := range []string{"evt:after-cut-1", "evt:lost-1"} {
		res := reserveOn(t, after, key, "boot-b")
		if res.Token <= handed {
			t.Fatalf("reservation %d after the power cut got token %d; tokens up to %d were handed out before it", i+1, res.Token, handed)
		}
	}
}

// TestSQLiteTokenMarkCommitsOncePerBlock: a run pays the mark's FULL
// commit only when a block runs out or a new boot begins, and tokens keep
// growing across both.
func TestSQLiteTokenMarkCommitsOncePerBlock(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var last int64
	jumps := 0
	for i := 0; i < 2*sqlite.TokenBlock+10; i++ {
		boot := "boot-a"
		if i >= sqlite.TokenBlock+5 {
			boot = "boot-b"
		}
		res := reserveOn(t, l, fmt.Sprintf("evt:block-%d", i), boot)
		if res.Token <= last {
			t.Fatalf("token %d after %d", res.Token, last)
		}
		if res.Token != last+1 {
			jumps++
		}
		last = res.Token
	}
	// A new block within a boot continues the count; a new boot jumps.
	if jumps != 1 {
		t.Errorf("%d jumps of the counter, want 1 (at boot-b)", jumps)
	}
}

// TestSQLiteRestoredBackupHandsOutNewTokens: tokens 1-3, a backup, 4-6,
// then the backup restored: the restored ledger is back in WAL mode once
// opened, and its first token is above every token handed out before,
// those after the backup included, on the same boot.
func TestSQLiteRestoredBackupHandsOutNewTokens(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	l, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	var handed int64
	for i := range 3 {
		handed = max(handed, reserveOn(t, l, fmt.Sprintf("evt:before-%d", i), "boot-a").Token)
	}
	backup := filepath.Join(dir, "backup.db")
	if err := l.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		handed = max(handed, reserveOn(t, l, fmt.Sprintf("evt:after-%d", i), "boot-a").Token)
	}
	l.Close()
	b, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil { // in place, as the restore does
		t.Fatal(err)
	}
	r, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := reserveOn(t, r, "evt:after-restore", "boot-a").Token; got <= handed {
		t.Errorf("the restored ledger handed out token %d; tokens up to %d were handed out before", got, handed)
	}
	if got := reserveOn(t, r, "evt:after-restore-2", "boot-a").Token; got <= handed {
		t.Errorf("the second token after the restore is %d", got)
	}
	db := rawDB(t, path)
	defer db.Close()
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode of the restored ledger: %q %v, want wal", mode, err)
	}
}

// TestSQLiteTokensUnderOwnersBoot: a process whose first token is drawn
// by a step other than a new key's (a failed key run again, a dead
// owner's spent key ended) draws it under its owner's boot, which asks
// for the owner only then (Identify): the count goes on from the mark
// that boot wrote, where under a boot of its own it would jump past the
// mark and commit a new one with an fsync.
func TestSQLiteTokensUnderOwnersBoot(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	open := func() *sqlite.Ledger {
		t.Helper()
		l, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	owner := ledger.Owner{Host: "h", BootID: "boot-a", PID: os.Getpid()}
	request := func(key string, maxAttempts int) ledger.ReserveRequest {
		return ledger.ReserveRequest{Key: key, Fingerprint: "fp", Command: []string{"true"}, MaxAttempts: maxAttempts,
			Lease: time.Minute, Identify: func() (ledger.Owner, string, string) { return owner, "/srv", "ops" }}
	}
	l := open()
	failed := reserveOn(t, l, "evt:boot-failed", "boot-a")
	if err := l.Finish(ctx, ledger.FinishRequest{Key: "evt:boot-failed", Token: failed.Token, AttemptID: failed.AttemptID,
		Status: ledger.StatusFailed, ExitCode: 2, ExitSource: "child", Class: ledger.ClassPermanent}); err != nil {
		t.Fatal(err)
	}
	held, err := l.Reserve(ctx, request("evt:boot-held", 1))
	if err != nil || held.Outcome != ledger.Reserved {
		t.Fatalf("Reserve: %+v, %v", held, err)
	}
	last := held.Token
	l.Close()

	for _, step := range []struct {
		name string
		req  ledger.ReserveRequest
	}{
		{"a failed key run again", func() ledger.ReserveRequest {
			r := request("evt:boot-failed", 3)
			r.RerunFailed = true
			return r
		}()},
		{"a dead owner's spent key ended", func() ledger.ReserveRequest {
			r := request("evt:boot-held", 1)
			r.OwnerDead = func(ledger.Owner) bool { return true }
			return r
		}()},
	} {
		l := open()
		if _, err := l.Reserve(ctx, step.req); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		rec, err := l.Get(ctx, step.req.Key)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Token != last+1 {
			t.Errorf("%s: token %d after %d; want the next one, drawn under the owner's boot", step.name, rec.Token, last)
		}
		last = rec.Token
		l.Close()
	}
}
