package sqlite_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/ledgertest"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

func openReadOnly(ctx context.Context, path string) (*sqlite.Ledger, error) {
	return sqlite.OpenWith(ctx, path, ledger.Options{ReadOnly: true})
}

func TestSQLiteReadOnlyConformance(t *testing.T) {
	ledgertest.RunReadOnly(t, func(t *testing.T, now func() time.Time) (ledger.Ledger, func() (ledger.Ledger, error)) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		w := openSQLite(t, path)
		w.Now = now
		return w, func() (ledger.Ledger, error) {
			r, err := openReadOnly(context.Background(), path)
			if err != nil {
				return nil, err
			}
			r.Now = now
			return r, nil
		}
	})
}

// TestSQLiteReadOnlyCreatesNothing: a read-only open of a missing or empty
// file is ErrNoLedger, and leaves no file or directory behind.
func TestSQLiteReadOnlyCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, path string
		setup      func(path string)
	}{
		{"missing file", filepath.Join(dir, "missing.db"), func(string) {}},
		{"missing directory", filepath.Join(dir, "state", "idem", "ledger.db"), func(string) {}},
		{"empty file", filepath.Join(dir, "empty.db"), func(p string) {
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"link to a missing file", filepath.Join(dir, "link.db"), func(p string) {
			if err := os.Symlink(filepath.Join(dir, "target.db"), p); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		tc.setup(tc.path)
		before := listDir(t, dir)
		l, err := openReadOnly(context.Background(), tc.path)
		if err == nil {
			l.Close()
			t.Errorf("%s: opened", tc.name)
			continue
		}
		var se *ledger.StoreError
		if !errors.Is(err, ledger.ErrNoLedger) || !errors.As(err, &se) {
			t.Errorf("%s: %v, want a *StoreError wrapping ErrNoLedger", tc.name, err)
		}
		if after := listDir(t, dir); after != before {
			t.Errorf("%s: the directory went from %s to %s", tc.name, before, after)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "empty.db")); err != nil || fi.Size() != 0 {
		t.Errorf("the empty file was initialised")
	}
}

// listDir names what is under dir, with sizes.
func listDir(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			b.WriteString(p + ":" + strconv.FormatInt(fi.Size(), 10) + " ")
		}
		return nil
	})
	return b.String()
}

// TestSQLiteReadOnlyBesideAWriter: while a writer holds the ledger (its
// -wal not yet checkpointed), a read-only open sees every commit, cannot
// write, and changes neither the file nor its mode.
func TestSQLiteReadOnlyBesideAWriter(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	w := openSQLite(t, path)
	finishNew(t, w, "evt:ro-beside-1")
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	r, err := openReadOnly(ctx, path)
	if err != nil {
		t.Fatalf("read-only open beside a writer: %v", err)
	}
	defer r.Close()
	if rec, err := r.Get(ctx, "evt:ro-beside-1"); err != nil || string(rec.Stdout) != "out evt:ro-beside-1" {
		t.Fatalf("Get: %+v, %v", rec, err)
	}
	finishNew(t, w, "evt:ro-beside-2")
	if recs, err := r.List(ctx, ledger.ListFilter{}); err != nil || len(recs) != 2 {
		t.Fatalf("List after the writer's second record: %d records, %v", len(recs), err)
	}
	if _, err := r.Reserve(ctx, ledger.ReserveRequest{Key: "evt:ro-beside-3", Fingerprint: "fp", MaxAttempts: 1}); err == nil {
		t.Fatalf("a read-only ledger reserved a key")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("the read-only open changed the file's mode: %v, %v", fi.Mode(), err)
	}
	if _, err := w.Get(ctx, "evt:ro-beside-3"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("the refused reservation is there: %v", err)
	}
}

// TestSQLiteReadOnlyWithoutWritePermission: another user who may read the
// ledger file, in a directory it may not write, reads it; nothing changes.
// As root (which ignores permissions) the reader is a helper process run
// as nobody; as anyone else, the file and directory lose write permission.
func TestSQLiteReadOnlyWithoutWritePermission(t *testing.T) {
	if path := os.Getenv("IDEM_TEST_READONLY_HELPER"); path != "" {
		readOnlyHelper(t, path)
		return
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	l, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	finishNew(t, l, "evt:ro-other-1")
	l.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	beforeDir := listDir(t, dir)

	if os.Geteuid() != 0 {
		os.Chmod(path, 0o444)
		os.Chmod(dir, 0o555)
		defer os.Chmod(dir, 0o755)
		readOnlyHelper(t, path)
	} else {
		nobody, err := user.Lookup("nobody")
		if err != nil {
			t.Skipf("no user nobody to read as: %v", err)
		}
		uid, _ := strconv.Atoi(nobody.Uid)
		gid, _ := strconv.Atoi(nobody.Gid)
		// nobody must reach the directory and run a copy of this test.
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, "readonly.test")
		if err := copyFile(os.Args[0], bin); err != nil {
			t.Fatal(err)
		}
		beforeDir = listDir(t, dir)
		cmd := exec.Command(bin, "-test.run=^TestSQLiteReadOnlyWithoutWritePermission$", "-test.v")
		cmd.Dir = "/"
		cmd.Env = append(os.Environ(), "IDEM_TEST_READONLY_HELPER="+path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("read as another user: ok")) {
			t.Fatalf("the reader run as nobody: %v\n%s", err, out)
		}
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("the read-only open altered the ledger")
	}
	if got := listDir(t, dir); got != beforeDir {
		t.Errorf("the read-only open left files: %s, was %s", got, beforeDir)
	}
}

// readOnlyHelper is the reader of TestSQLiteReadOnlyWithoutWritePermission.
func readOnlyHelper(t *testing.T, path string) {
	if err := syscall.Access(path, 2 /* W_OK */); err == nil {
		t.Fatalf("the reader may write %s: the test proves nothing", path)
	}
	ctx := context.Background()
	l, err := openReadOnly(ctx, path)
	if err != nil {
		t.Fatalf("read-only open without write permission: %v", err)
	}
	defer l.Close()
	rec, err := l.Get(ctx, "evt:ro-other-1")
	if err != nil || string(rec.Stdout) != "out evt:ro-other-1" {
		t.Fatalf("Get: %+v, %v", rec, err)
	}
	if h, err := l.History(ctx, "evt:ro-other-1"); err != nil || len(h) != 1 {
		t.Fatalf("History: %+v, %v", h, err)
	}
	if recs, err := l.List(ctx, ledger.ListFilter{}); err != nil || len(recs) != 1 {
		t.Fatalf("List: %d records, %v", len(recs), err)
	}
	if res, err := l.Purge(ctx, ledger.PurgeRequest{Selector: ledger.Selector{All: true}, DryRun: true}); err != nil || res.Removed != 1 {
		t.Fatalf("Purge --dry-run: %+v, %v", res, err)
	}
	t.Log("read as another user: ok")
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}
