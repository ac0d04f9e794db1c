package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/ledgertest"
)

// BenchmarkRunPath is a run's three statements on PostgreSQL: Reserve (the
// claim of a new key), SetChild and Finish (synchronous commit), with
// 100 bytes of output; replay=1 is a repeat answered from the ledger.
func BenchmarkRunPath(b *testing.B) {
	ctx := context.Background()
	l := openLedger(b, ledgertest.PostgresDSN(b), freshSchema(b))
	out := bytes.Repeat([]byte("x"), 100)
	run := func(key string) {
		r, err := l.Reserve(ctx, ledger.ReserveRequest{Key: key, Fingerprint: "fp", Command: []string{"true"},
			MaxAttempts: 3, Lease: time.Minute, Owner: ledger.Owner{Host: "bench", PID: 1}})
		if err != nil || r.Outcome != ledger.Reserved && r.Outcome != ledger.Replay {
			b.Fatalf("reserve: %v %v", r, err)
		}
		if r.Outcome == ledger.Replay {
			return
		}
		if err := l.SetChild(ctx, key, r.Token, 4243, 2); err != nil {
			b.Fatal(err)
		}
		if err := l.Finish(ctx, ledger.FinishRequest{Key: key, Token: r.Token, AttemptID: r.AttemptID,
			Status: ledger.StatusSucceeded, ExitSource: "child", Class: ledger.ClassSuccess, OutputStored: true,
			Stdout: out, Stderr: out}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("new", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			run(fmt.Sprintf("bench-pg-run-%d", i))
		}
	})
	run("bench-pg-replay-1")
	b.Run("replay", func(b *testing.B) {
		for b.Loop() {
			run("bench-pg-replay-1")
		}
	})
}
