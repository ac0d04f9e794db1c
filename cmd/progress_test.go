package cmd

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/runner"
)

func TestProgressOnATerminalOrALog(t *testing.T) {
	var b bytes.Buffer
	if newProgress(&b, true, true, nil) != nil || newProgress(&b, false, true, nil) != nil {
		t.Error("a progress callback with --quiet")
	}
	if newProgress(&b, true, false, nil) == nil {
		t.Error("no progress callback on a terminal")
	}
	// Not a terminal: whole lines, one per backoff, wait and takeover.
	p := newProgress(&b, false, false, nil)
	if p == nil {
		t.Fatal("no progress callback for a log")
	}
	holder := ledger.Owner{Host: "web-2", PID: 4242}
	for _, e := range []runner.Event{
		{Kind: runner.EventWait, Key: "evt:4711", Attempt: 1, MaxAttempts: 3, Holder: holder},
		{Kind: runner.EventWait, Key: "evt:4711", Attempt: 1, MaxAttempts: 3, Holder: holder},
		{Kind: runner.EventResume, Key: "evt:4711"},
		{Kind: runner.EventTakeover, Key: "evt:4711", Attempt: 2, MaxAttempts: 3, Holder: holder},
		{Kind: runner.EventBackoff, Key: "evt:4711", Attempt: 2, MaxAttempts: 3, ExitCode: 75, Delay: 1500 * time.Millisecond},
		{Kind: runner.EventResume, Key: "evt:4711"},
	} {
		p(e)
	}
	want := "idem: evt:4711: in progress on web-2 (pid 4242, attempt 1/3); waiting for it (--wait)\n" +
		"idem: evt:4711: taking over from web-2 (pid 4242), which is gone or whose lease expired; this is attempt 2/3\n" +
		"idem: evt:4711: attempt 2/3 exited 75; next try in 2s\n"
	if got := b.String(); got != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}
}

func TestProgressRendersOneLineInPlace(t *testing.T) {
	var b bytes.Buffer
	fresh := 0
	p := &progress{w: &b, now: func() time.Time { return time.Unix(1000, 0) }, fresh: func() { fresh++ }}
	events := []runner.Event{
		{Kind: runner.EventWait, Key: "evt:4711", Attempt: 1, MaxAttempts: 3, Delay: 20 * time.Millisecond,
			Holder: ledger.Owner{Host: "web-2", PID: 4242}},
		{Kind: runner.EventWait, Key: "evt:4711", Attempt: 1, MaxAttempts: 3, Delay: 30 * time.Millisecond,
			Holder: ledger.Owner{Host: "web-2", PID: 4242}}, // the same text: not written again
		{Kind: runner.EventWait, Key: "evt:4711", Attempt: 2, MaxAttempts: 3, Delay: time.Second, Waited: 12300 * time.Millisecond,
			Holder: ledger.Owner{Host: "web-2", PID: 4242}},
		{Kind: runner.EventResume},
		{Kind: runner.EventBackoff, Key: "evt:4711", Attempt: 1, MaxAttempts: 5, ExitCode: 75, Delay: 2500 * time.Millisecond},
		{Kind: runner.EventResume},
		{Kind: runner.EventResume}, // nothing shown: nothing written
	}
	for _, e := range events {
		p.event(e)
	}
	want := "\r\x1b[Kidem: evt:4711: waiting for web-2 pid 4242 (attempt 1/3), 0s so far" +
		"\r\x1b[Kidem: evt:4711: waiting for web-2 pid 4242 (attempt 2/3), 13s so far" +
		"\r\x1b[K" +
		"\r\x1b[Kidem: evt:4711: attempt 1/5 exited 75; next try in 3s" +
		"\r\x1b[K"
	if got := b.String(); got != want {
		t.Errorf("rendered\n%q\nwant\n%q", got, want)
	}
	if fresh != 2 {
		t.Errorf("fresh line asked %d times, want 2 (once per status line shown from nothing)", fresh)
	}
	if p.stop != nil {
		t.Error("the backoff's countdown was not stopped at resume")
	}
}

func TestSeconds(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", -time.Second: "0s", time.Millisecond: "1s", time.Second: "1s", 1500 * time.Millisecond: "2s",
		99 * time.Second: "99s", 100 * time.Second: "1m40s", time.Hour: "60m00s",
	} {
		if got := seconds(d); got != want {
			t.Errorf("seconds(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestProgressOnARealTerminal runs idem with stderr on a pseudo-terminal:
// a transient failure's backoff shows the status line, then erases it.
func TestProgressOnARealTerminal(t *testing.T) {
	master, slave := openPTY(t)
	defer master.Close()
	defer slave.Close()
	read := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(master) // EIO once the slave is closed
		read <- b
	}()
	dir := t.TempDir()
	t.Setenv("IDEM_LEDGER", filepath.Join(dir, "ledger.db"))
	t.Setenv("NO_COLOR", "1")
	var stdout bytes.Buffer
	code := Main(context.Background(), []string{"run", "--key", "evt:tty:1", "--initial-delay", "100ms", "--jitter", "0",
		"--", "sh", "-c", `[ "$IDEM_ATTEMPT" = 2 ] || exit 75; echo done`}, &stdout, slave, linkedAll())
	slave.Close()
	out := string(<-read)
	if code != 0 || stdout.String() != "done\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), out)
	}
	// the terminal turns \n into \r\n; the status line is written, then erased
	want := "\r\x1b[Kidem: evt:tty:1: attempt 1/3 exited 75; next try in 100ms\r\x1b[K"
	if out != want {
		t.Errorf("the terminal got %q, want %q", out, want)
	}
}

func TestCountdown(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{time.Millisecond, "100ms"},
		{200 * time.Millisecond, "200ms"},
		{250 * time.Millisecond, "300ms"},
		{999 * time.Millisecond, "1s"},
		{time.Second, "1s"},
		{1200 * time.Millisecond, "2s"},
		{150 * time.Second, "2m30s"},
	} {
		if got := countdown(c.d); got != c.want {
			t.Errorf("countdown(%v)=%q, want %q", c.d, got, c.want)
		}
	}
}
