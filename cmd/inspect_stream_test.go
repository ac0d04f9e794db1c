package cmd

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

// purgeOnFirstWrite is an output that, when the listing first writes to
// it, purges every record: a listing that streams has read one page by
// then, and finds nothing more; one that loads everything first lists
// every record.
type purgeOnFirstWrite struct {
	t     *testing.T
	l     ledger.Ledger
	out   bytes.Buffer
	wrote bool
}

func (w *purgeOnFirstWrite) Write(p []byte) (int, error) {
	if !w.wrote {
		w.wrote = true
		if _, err := w.l.Purge(context.Background(), ledger.PurgeRequest{Selector: ledger.Selector{All: true}, Force: true}); err != nil {
			w.t.Errorf("purge: %v", err)
		}
	}
	return w.out.Write(p)
}

func seedLedger(t *testing.T, n int) (string, ledger.Ledger) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	for i := range n {
		key := fmt.Sprintf("evt:stream:%04d", i)
		res, err := l.Reserve(ctx, ledger.ReserveRequest{Key: key, Fingerprint: "fp", Command: []string{"true"},
			MaxAttempts: 1, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Finish(ctx, ledger.FinishRequest{Key: key, Token: res.Token, AttemptID: res.AttemptID,
			Status: ledger.StatusFailed, ExitCode: 1, ExitSource: "child", Class: ledger.ClassPermanent,
			OutputStored: true, StderrTail: []byte("no\n")}); err != nil {
			t.Fatal(err)
		}
	}
	return path, l
}

// TestInspectStreams: the first rows of a listing, table or JSON, reach
// the output before its second page is read (no timing involved: the
// first write removes every record).
func TestInspectStreams(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		count func(string) int
	}{
		{"table", nil, func(s string) int { return strings.Count(s, "evt:stream:") }},
		{"json", []string{"--json"}, func(s string) int { return strings.Count(s, `"key": "evt:stream:`) }},
		{"status", []string{"--status", "failed,retryable"}, func(s string) int { return strings.Count(s, "evt:stream:") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, l := seedLedger(t, 50)
			w := &purgeOnFirstWrite{t: t, l: l}
			var stderr bytes.Buffer
			args := append([]string{"inspect", "--ledger", path, "--limit", "0", "--page-size", "10"}, tc.args...)
			if code := Main(context.Background(), args, w, &stderr, linkedAll()); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			if got := tc.count(w.out.String()); got != 10 {
				t.Errorf("listed %d records, want the first page's 10:\n%s", got, w.out.String())
			}
		})
	}
}
