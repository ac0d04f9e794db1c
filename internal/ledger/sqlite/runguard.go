package sqlite

import (
	"context"
	"database/sql"

	"github.com/idemhq/idem/internal/ledger"
)

// RunGuard reads the run guard (see ledger.RunGuarder).
func (s *Ledger) RunGuard(ctx context.Context) (ledger.RunGuard, error) {
	var g ledger.RunGuard
	var dev, ino int64
	err := s.conn.QueryRowContext(ctx, `SELECT secret, lock_dev, lock_ino FROM run_guard WHERE singleton = 1`).
		Scan(&g.Secret, &dev, &ino)
	if err != nil {
		return g, storeErr("read", s.path, err)
	}
	g.LockDev, g.LockIno = uint64(dev), uint64(ino)
	if s.mainID != (fileID{}) {
		g.File = s.mainID.String()
	}
	return g, nil
}

// BindRunLock records the run lock file's identity.
func (s *Ledger) BindRunLock(ctx context.Context, dev, ino uint64) error {
	return s.writeSync(ctx, "bind the run lock", true, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE run_guard SET lock_dev = ?, lock_ino = ? WHERE singleton = 1`,
			int64(dev), int64(ino))
		return err
	})
}
