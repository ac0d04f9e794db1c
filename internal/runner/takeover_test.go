package runner

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/runner/procs"
)

// forkedDuringScan is a Finder whose first scan misses a process of an
// earlier run: forked, as the scan read /proc, by one that then exited.
// Every scan after it finds the process until a signal ends it.
type forkedDuringScan struct {
	procs.Finder
	scans   int
	alive   bool
	signals []syscall.Signal
}

func (f *forkedDuringScan) Find(procs.Run, []byte) ([]procs.Process, error) {
	f.scans++
	if f.scans == 1 || !f.alive {
		return nil, nil
	}
	return []procs.Process{{PID: 4242, Start: 7}}, nil
}

func (f *forkedDuringScan) Holding(uint64, uint64, string) ([]procs.Process, error) { return nil, nil }

func (f *forkedDuringScan) Signal(_ procs.Process, sig syscall.Signal) bool {
	f.signals = append(f.signals, sig)
	if sig == syscall.SIGTERM || sig == syscall.SIGKILL {
		f.alive = false
	}
	return f.alive
}

// TestStopRunScansTwiceWhenNothingFound: a first scan that finds nothing
// is not taken for "none left": a second follows at once, finds the
// process the first missed, and stops it before stopRun returns.
func TestStopRunScansTwiceWhenNothingFound(t *testing.T) {
	f := &forkedDuringScan{alive: true}
	r := &Runner{Procs: f, Clock: SystemClock{}}
	n, err := r.stopRun(context.Background(), scan{before: procs.Run{Key: "evt:key-1", Token: 2}}, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || len(f.signals) == 0 || f.signals[0] != syscall.SIGTERM || f.alive {
		t.Errorf("stopRun found %d, sent %v, the process alive %v; want it found by the second scan and stopped", n, f.signals, f.alive)
	}
}
