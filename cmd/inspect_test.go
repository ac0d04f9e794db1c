package cmd

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 17, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"30m", now.Add(-30 * time.Minute)},
		{"2d", now.Add(-48 * time.Hour)},
		{"1d12h", now.Add(-36 * time.Hour)},
		{"2026-12-01T00:00:00Z", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{"2026-12-01T02:00:00+02:00", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
	} {
		got, err := parseSince(tc.in, now)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "yesterday", "-1h", "2026-12-01"} {
		if _, err := parseSince(bad, now); err == nil {
			t.Errorf("parseSince(%q): no error", bad)
		}
	}
}

// testApp is the app of an in-process test: the ledger at path, no
// environment but what env sets, and a clock stopped at now.
func testApp(t *testing.T, path string, now time.Time, env map[string]string) (*app, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	a := newApp(nil, &stdout, &stderr, linkedAll())
	a.stdin = nil
	a.environ = []string{"IDEM_LEDGER=" + path}
	a.getenv = func(name string) string {
		if name == "IDEM_LEDGER" {
			return path
		}
		return env[name]
	}
	a.now = func() time.Time { return now }
	return a, &stdout, &stderr
}

// TestInspectListOnTheAppClock: ages, durations and --since are measured
// on the app's clock (a file's records are stamped by this host), so a
// listing at a fixed time reads exactly.
func TestInspectListOnTheAppClock(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	clock := t0
	l.Now = func() time.Time { return clock }
	for i, tc := range []struct {
		key  string
		at   time.Duration
		took time.Duration
		code int
	}{
		{"job:old", 0, 90 * time.Second, 0},
		{"job:new", 3 * time.Hour, 2 * time.Second, 3},
	} {
		clock = t0.Add(tc.at)
		res, err := l.Reserve(ctx, ledger.ReserveRequest{Key: tc.key, Fingerprint: "fp", Command: []string{"true"},
			MaxAttempts: 1, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(tc.took)
		st, class := ledger.StatusSucceeded, ledger.ClassSuccess
		if tc.code != 0 {
			st, class = ledger.StatusFailed, ledger.ClassPermanent
		}
		if err := l.Finish(ctx, ledger.FinishRequest{Key: tc.key, Token: res.Token, AttemptID: res.AttemptID,
			Status: st, ExitCode: tc.code, ExitSource: "child", Class: class, Duration: tc.took, OutputStored: true,
			StderrTail: []byte(fmt.Sprintf("line %d\n", i))}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()

	now := t0.Add(4*time.Hour + 2*time.Second)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"all", nil, "ledger: " + path + "\n" +
			"KEY      STATUS     ATTEMPTS  EXIT  REPLAYS  AGE  DURATION  REASON\n" +
			"job:new  failed     1/1       3     0        1h   2.0s      exit 3: line 1\n" +
			"job:old  succeeded  1/1       0     0        3h   1m30s\n"},
		{"since", []string{"--since", "2h"}, "ledger: " + path + "\n" +
			"KEY      STATUS  ATTEMPTS  EXIT  REPLAYS  AGE  DURATION  REASON\n" +
			"job:new  failed  1/1       3     0        1h   2.0s      exit 3: line 1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, stdout, stderr := testApp(t, path, now, map[string]string{"NO_COLOR": "1"})
			if code := a.main(ctx, append([]string{"inspect"}, tc.args...)); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if got := stdout.String(); got != tc.want {
				t.Errorf("stdout:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}
