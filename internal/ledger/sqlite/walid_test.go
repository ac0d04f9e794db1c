package sqlite

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// walImage opens a new ledger in dir, writes n stamped transactions and
// returns the ledger's identity and its -wal as it lies (the ledger is
// left open: closing would checkpoint it away).
func walImage(t testing.TB, n int) (uint32, []byte) {
	t.Helper()
	l, path := newLedger(t)
	for i := range n {
		err := l.write(context.Background(), "test", func(ctx context.Context, tx querier) error {
			_, err := tx.ExecContext(ctx, `UPDATE counters SET value = value WHERE name = ?`, i)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	w, err := os.ReadFile(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	return l.id, w
}

// TestWALIdentities: every committed transaction of a ledger's -wal
// carries its identity on page 1; a torn or foreign frame ends what
// SQLite, and the check, would replay.
func TestWALIdentities(t *testing.T) {
	id, w := walImage(t, 3)
	if !isIdemID(id) || id == legacyApplicationID {
		t.Fatalf("the ledger's identity is %#x", id)
	}
	ids, ok := walIdentities(w)
	if !ok || len(ids) < 3 {
		t.Fatalf("walIdentities = %v, %v; want one per transaction, at least 3", ids, ok)
	}
	for _, got := range ids {
		if got != id {
			t.Fatalf("a transaction carries %#x, want the ledger's %#x", got, id)
		}
	}
	pageSize := int(binary.BigEndian.Uint32(w[8:]))
	frame := walFrameHdr + pageSize
	frames := (len(w) - walHeaderSize) / frame

	// The -wal may go on past its current frames with an earlier
	// generation's (it restarts in place after a checkpoint).
	end := walHeaderSize
	for end+frame <= len(w) && binary.BigEndian.Uint32(w[end+8:]) == binary.BigEndian.Uint32(w[16:]) {
		end += frame
	}
	torn := append([]byte(nil), w...)
	torn[end-1] ^= 0xff // the last frame, a commit frame, no longer checks out
	if got, _ := walIdentities(torn); len(got) >= len(ids) {
		t.Errorf("a torn last transaction still counts: %d of %d", len(got), len(ids))
	}
	stale := append([]byte(nil), w...)
	stale[walHeaderSize+8] ^= 0xff // the first frame's salt: an earlier generation's
	if got, ok := walIdentities(stale); !ok || len(got) != 0 {
		t.Errorf("frames of an earlier generation count: %v, %v", got, ok)
	}
	bad := append([]byte(nil), w...)
	bad[30] ^= 0xff // the header's checksum
	if _, ok := walIdentities(bad); ok {
		t.Errorf("a -wal whose header does not check out is taken as valid")
	}
	if (end-walHeaderSize)/frame < 3 || frames < 3 {
		t.Fatalf("only %d frames", (end-walHeaderSize)/frame)
	}
}

// FuzzWALIdentities: a -wal is another program's (or user's) file, read
// before SQLite opens the ledger: whatever it holds, reading it neither
// panics nor reports more transactions than whole frames fit in it.
func FuzzWALIdentities(f *testing.F) {
	_, w := walImage(f, 1)
	f.Add(w)
	f.Add([]byte{})
	f.Add(w[:walHeaderSize])
	f.Fuzz(func(t *testing.T, w []byte) {
		ids, _ := walIdentities(w)
		if len(w) < walHeaderSize && len(ids) > 0 {
			t.Fatalf("%d identities from %d bytes", len(ids), len(w))
		}
		if len(ids) > 0 && len(ids) > (len(w)-walHeaderSize)/(walFrameHdr+512) {
			t.Fatalf("%d identities from %d bytes: more than whole frames fit", len(ids), len(w))
		}
	})
}

// TestWALIdentitiesByteOrders: -wal images made by another implementation
// of SQLite's format (the fuzz seeds), in both of its checksum byte orders:
// a commit frame ends a transaction; frames after the last one do not
// count.
func TestWALIdentitiesByteOrders(t *testing.T) {
	for _, tc := range []struct {
		seed string
		want []uint32
	}{
		{"header-only", nil},
		{"one-commit-le", []uint32{0x69123456}},
		{"two-tx-be-uncommitted-tail", []uint32{0x69abcdef}},
	} {
		b, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzWALIdentities", tc.seed))
		if err != nil {
			t.Fatal(err)
		}
		w, err := unquoteSeed(b)
		if err != nil {
			t.Fatalf("%s: %v", tc.seed, err)
		}
		ids, ok := walIdentities(w)
		if !ok || !slices.Equal(ids, tc.want) {
			t.Errorf("%s: walIdentities = %#x, %v; want %#x", tc.seed, ids, ok, tc.want)
		}
	}
}

// unquoteSeed reads a one-value []byte seed file of go test's fuzz corpus.
func unquoteSeed(b []byte) ([]byte, error) {
	_, lit, ok := strings.Cut(string(b), "[]byte(")
	if !ok {
		return nil, fmt.Errorf("not a []byte seed")
	}
	s, err := strconv.Unquote(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(lit), ")")))
	return []byte(s), err
}
