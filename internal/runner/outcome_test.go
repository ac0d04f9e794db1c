package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// finishFaults is a real ledger whose outcome writes fail with a store
// error (a disk that has no room for the outcome and its output) while
// failFinish is not 0; < 0: always.
type finishFaults struct {
	ledger.Ledger
	mu         sync.Mutex
	failFinish int
	finishes   int
}

func (f *finishFaults) Finish(ctx context.Context, req ledger.FinishRequest) error {
	f.mu.Lock()
	f.finishes++
	fail := f.failFinish != 0
	if f.failFinish > 0 {
		f.failFinish--
	}
	f.mu.Unlock()
	if fail {
		return &ledger.StoreError{Op: "record outcome", Err: errors.New("disk full")}
	}
	return f.Ledger.Finish(ctx, req)
}

// TestOutcomeWriteRetried: outcome writes that fail for a while are
// retried within the lease; the success is recorded and replays.
func TestOutcomeWriteRetried(t *testing.T) {
	f := &finishFaults{Ledger: openLedger(t), failFinish: 2}
	o, _, _ := options("outcome:retried", "echo", "ok")
	o.Lease, o.KillGrace = 4*time.Second, 100*time.Millisecond
	res, err := newRunner(f, nil).Run(context.Background(), o)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if res.Status != ledger.StatusSucceeded || f.finishes != 3 {
		t.Errorf("status %s after %d outcome writes, want succeeded after 3", res.Status, f.finishes)
	}
}

// TestOutcomeWriteNeverLandsNotFinal: a command that succeeds, run again
// and again while its outcome can never be written, never leaves its key
// in a final state (today: failed, exit 75, replayed for ever, after the
// budget of 3 went to abandoned attempts). Each invocation returns
// *OutcomeError; the key stays open to a run that can record.
func TestOutcomeWriteNeverLandsNotFinal(t *testing.T) {
	sq := openLedger(t)
	f := &finishFaults{Ledger: sq, failFinish: -1}
	for i := 1; i <= 4; i++ {
		o, _, _ := options("outcome:never", "echo", "ok")
		o.Lease, o.KillGrace = time.Second, 100*time.Millisecond
		r := newRunner(f, nil)
		r.Host.Name = fmt.Sprintf("host-%d", i) // another host: only expiry frees the key
		_, err := r.Run(context.Background(), o)
		var oe *OutcomeError
		if !errors.As(err, &oe) {
			t.Fatalf("run %d: %v, want *OutcomeError", i, err)
		}
		time.Sleep(1100 * time.Millisecond) // past the lease, if it was left in progress
	}
	rec, err := sq.Get(context.Background(), "outcome:never")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status == ledger.StatusFailed || rec.Status == ledger.StatusSucceeded {
		t.Fatalf("record %s, exit %d: a final state no run recorded", rec.Status, rec.ExitCode)
	}
	f.failFinish = 0
	o, _, _ := options("outcome:never", "echo", "ok")
	res, err := newRunner(f, nil).Run(context.Background(), o)
	if err != nil || res.Status != ledger.StatusSucceeded || res.Replayed {
		t.Fatalf("a run that can record: %+v, %v; want it to run and succeed", res, err)
	}
}
