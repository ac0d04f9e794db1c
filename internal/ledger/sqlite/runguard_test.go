package sqlite

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// TestRunGuardAfterReservation: the run guard a reservation read with its
// token is the ledger's, as a read of its own would give it; a binding of
// the run lock made after the reservation is what the next read gives,
// not the guard as the reservation read it.
func TestRunGuardAfterReservation(t *testing.T) {
	ctx := context.Background()
	l, _ := newLedger(t)
	reserve := func(key string) {
		t.Helper()
		r, err := l.Reserve(ctx, ledger.ReserveRequest{Key: key, Fingerprint: "sha256:guard",
			Command: []string{"true"}, MaxAttempts: 1, Owner: benchOwner(), Lease: time.Minute})
		if err != nil || r.Outcome != ledger.Reserved {
			t.Fatalf("reserve %s: %v, %v", key, r, err)
		}
	}
	var want ledger.RunGuard
	var dev, ino int64
	if err := l.conn.QueryRowContext(ctx, `SELECT secret, lock_dev, lock_ino FROM run_guard`).Scan(&want.Secret, &dev, &ino); err != nil {
		t.Fatal(err)
	}
	reserve("guard:first")
	g, err := l.RunGuard(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g.Secret, want.Secret) || len(g.Secret) != 32 || g.LockDev != uint64(dev) || g.LockIno != uint64(ino) || g.File == "" {
		t.Errorf("guard after a reservation: %+v; want secret %x, lock %d:%d, the file named", g, want.Secret, dev, ino)
	}
	reserve("guard:second")
	if ok, err := l.BindRunLock(ctx, uint64(dev), uint64(ino), 7, 8); err != nil || !ok {
		t.Fatalf("BindRunLock over the binding read: %v, %v; want bound", ok, err)
	}
	if g, err := l.RunGuard(ctx); err != nil || g.LockDev != 7 || g.LockIno != 8 || !bytes.Equal(g.Secret, want.Secret) {
		t.Errorf("guard after a reservation and a binding: %+v, %v; want the lock 7:8", g, err)
	}
}

// TestBindRunLockOverTheBindingRead: a binding is made only over the file
// the caller read; over any other (another run bound the ledger since),
// nothing changes and BindRunLock says so.
func TestBindRunLockOverTheBindingRead(t *testing.T) {
	ctx := context.Background()
	l, _ := newLedger(t)
	if ok, err := l.BindRunLock(ctx, 0, 0, 7, 8); err != nil || !ok {
		t.Fatalf("first binding: %v, %v; want bound", ok, err)
	}
	if ok, err := l.BindRunLock(ctx, 0, 0, 9, 10); err != nil || ok {
		t.Errorf("a binding over none, made after another run's: %v, %v; want not bound", ok, err)
	}
	if ok, err := l.BindRunLock(ctx, 7, 9, 9, 10); err != nil || ok {
		t.Errorf("a binding over another file: %v, %v; want not bound", ok, err)
	}
	if g, err := l.RunGuard(ctx); err != nil || g.LockDev != 7 || g.LockIno != 8 {
		t.Errorf("guard: %+v, %v; want the lock 7:8 still", g, err)
	}
	if ok, err := l.BindRunLock(ctx, 7, 8, 9, 10); err != nil || !ok {
		t.Errorf("a binding over the one read: %v, %v; want bound", ok, err)
	}
	if g, err := l.RunGuard(ctx); err != nil || g.LockDev != 9 || g.LockIno != 10 {
		t.Errorf("guard: %+v, %v; want the lock 9:10", g, err)
	}
}
