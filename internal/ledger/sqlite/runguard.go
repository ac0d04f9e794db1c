package sqlite

import (
	"context"

	"github.com/idemhq/idem/internal/ledger"
)

// RunGuard reads the run guard (see ledger.RunGuarder): as the last
// reservation that drew a token read it (see nextToken), once, or else
// from the ledger.
func (s *Ledger) RunGuard(ctx context.Context) (ledger.RunGuard, error) {
	s.mu.Lock()
	read := s.guard
	s.guard = nil
	s.mu.Unlock()
	var g ledger.RunGuard
	if read != nil {
		g = *read
	} else {
		var dev, ino int64
		err := s.conn.QueryRowContext(ctx, `SELECT secret, lock_dev, lock_ino FROM run_guard WHERE singleton = 1`).
			Scan(&g.Secret, &dev, &ino)
		if err != nil {
			return g, storeErr("read", s.path, err)
		}
		g.LockDev, g.LockIno = uint64(dev), uint64(ino)
	}
	if s.mainID != (fileID{}) {
		g.File = s.mainID.String()
	}
	return g, nil
}

// BindRunLock records the run lock file's identity, if the ledger is
// still bound to the file the caller read (see ledger.RunGuarder).
func (s *Ledger) BindRunLock(ctx context.Context, oldDev, oldIno, dev, ino uint64) (bool, error) {
	bound := false
	err := s.writeSync(ctx, "bind the run lock", true, func(ctx context.Context, tx querier) error {
		s.guard = nil // read before this binding
		res, err := tx.ExecContext(ctx, `UPDATE run_guard SET lock_dev = ?, lock_ino = ?
			WHERE singleton = 1 AND lock_dev = ? AND lock_ino = ?`, int64(dev), int64(ino), int64(oldDev), int64(oldIno))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		bound = n == 1
		return err
	})
	return bound, err
}
