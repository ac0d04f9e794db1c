package ledgertest

import (
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// ReadOnlyOpener returns a ledger on a fresh, empty store whose clock is
// now, and a function that opens the same store for reading only
// (ledger.Options{ReadOnly: true}), its clock now as well. It closes the
// first ledger itself (t.Cleanup); the suite closes what the function
// returns.
type ReadOnlyOpener func(t *testing.T, now func() time.Time) (ledger.Ledger, func() (ledger.Ledger, error))

// RunReadOnly runs the conformance suite of read-only opens.
func RunReadOnly(t *testing.T, open ReadOnlyOpener) {
	t.Run("ReadOnlySeesWhatWasWritten", func(t *testing.T) {
		c := NewClock()
		w, reader := open(t, c.Now)
		e := &env{t: t, l: w, clock: c, ctx: t.Context()}
		testReadOnlySees(e, reader)
	})
}

// testReadOnlySees: a read-only ledger reads what the writer recorded
// (records, outputs, history, the list, a purge's dry run), and a dry run
// through it removes nothing.
func testReadOnlySees(e *env, reader func() (ledger.Ledger, error)) {
	t := e.t
	done := e.reserve(request("evt:ro-done", ownerA))
	e.finish("evt:ro-done", done, ledger.StatusSucceeded, 0, ledger.ClassSuccess)
	e.clock.Advance(time.Second)
	running := e.reserve(request("evt:ro-running", ownerB))
	e.mustOutcome(running, ledger.Reserved)

	r, err := reader()
	if err != nil {
		t.Fatalf("read-only open: %v", err)
	}
	defer r.Close()
	rec, err := r.Get(e.ctx, "evt:ro-done")
	if err != nil || rec.Status != ledger.StatusSucceeded || string(rec.Stdout) != "out evt:ro-done" || string(rec.Stderr) != "err evt:ro-done" {
		t.Fatalf("Get: %+v, %v; want the succeeded record with its output", rec, err)
	}
	if h, err := r.History(e.ctx, "evt:ro-done"); err != nil || len(h) != 1 || h[0].Class != ledger.ClassSuccess {
		t.Errorf("History: %+v, %v", h, err)
	}
	list, err := r.List(e.ctx, ledger.ListFilter{})
	var keys []string
	for _, rec := range list {
		keys = append(keys, rec.Key)
	}
	if err != nil || !slices.Equal(keys, []string{"evt:ro-running", "evt:ro-done"}) {
		t.Errorf("List: %v, %v; want the running record, then the finished one", keys, err)
	}
	if _, err := r.Get(e.ctx, "evt:ro-missing"); err != ledger.ErrNotFound {
		t.Errorf("Get of an unknown key: %v, want ErrNotFound", err)
	}
	res, err := r.Purge(e.ctx, ledger.PurgeRequest{Selector: ledger.Selector{All: true}, DryRun: true})
	if err != nil || res.Removed != 1 || !slices.Equal(res.Keys, []string{"evt:ro-done"}) ||
		len(res.Live) != 1 || res.Live[0].Key != "evt:ro-running" {
		t.Fatalf("Purge --dry-run: %+v, %v; want evt:ro-done to go and evt:ro-running kept as live", res, err)
	}
	for _, k := range []string{"evt:ro-done", "evt:ro-running"} {
		e.get(k)
	}
}
