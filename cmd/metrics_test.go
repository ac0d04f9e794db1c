package cmd

import (
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

func TestWriteMetricsEscapesAndUnits(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	m := &ledger.Metrics{Now: now, Records: map[ledger.Status]int64{ledger.StatusInProgress: 2},
		OldestInProgress: now.Add(-90 * time.Second),
		LastSuccess:      []ledger.GroupSuccess{{Group: `we"ird\grp`, Last: now.Add(-1500 * time.Millisecond)}},
		OtherGroups:      3, Other: now}
	var b strings.Builder
	writeMetrics(&b, m)
	out := b.String()
	for _, want := range []string{
		"idem_records{status=\"in_progress\"} 2\n",
		"idem_in_progress_oldest_age_seconds 90\n",
		"idem_last_success_timestamp_seconds{group=\"we\\\"ird\\\\grp\"} 1796180398.5\n",
		"idem_last_success_timestamp_seconds{group=\"other\"} 1796180400\n",
		"idem_last_success_other_groups 3\n",
		"# TYPE idem_attempts_total counter\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
	if !strings.HasSuffix(out, "\n") {
		t.Errorf("the last line must end with a line feed")
	}
}

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    ledger.Record
		want string
	}{
		{"succeeded", ledger.Record{Status: ledger.StatusSucceeded, HasExit: true}, ""},
		{"in progress", ledger.Record{Status: ledger.StatusInProgress}, ""},
		{"permanent", ledger.Record{Status: ledger.StatusFailed, HasExit: true, ExitCode: 2, Class: ledger.ClassPermanent,
			Reason: "no such file", Attempts: 3, MaxAttempts: 3}, "exit 2: no such file"},
		{"budget spent", ledger.Record{Status: ledger.StatusFailed, HasExit: true, ExitCode: 75, Class: ledger.ClassTransient,
			Reason: "503", Attempts: 3, MaxAttempts: 3}, "budget spent (3/3): exit 75: 503"},
		{"timeout", ledger.Record{Status: ledger.StatusRetryable, HasExit: true, ExitCode: 124, Class: ledger.ClassTimeout,
			Attempts: 1, MaxAttempts: 3}, "timeout (exit 124)"},
		{"interrupted", ledger.Record{Status: ledger.StatusRetryable, HasExit: true, ExitCode: 143, Class: ledger.ClassInterrupted,
			Attempts: 1, MaxAttempts: 3}, "interrupted by SIGTERM"},
		{"abandoned", ledger.Record{Status: ledger.StatusFailed, HasExit: true, ExitCode: 75, Class: ledger.ClassAbandoned,
			Attempts: 3, MaxAttempts: 3}, "budget spent (3/3): abandoned: its idem died or lost the lease"},
		{"before classes were kept", ledger.Record{Status: ledger.StatusFailed, HasExit: true, ExitCode: 1}, "exit 1"},
	} {
		if got := reason(&tc.r); got != tc.want {
			t.Errorf("%s: reason = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestEscapeControls(t *testing.T) {
	for _, tc := range []struct {
		in        string
		keepLines bool
		want      string
	}{
		{"plain é", false, "plain é"},
		{"\x1b[31mred\x1b[0m", false, `\x1b[31mred\x1b[0m`},
		{"a\nb\tc", false, `a\x0ab\x09c`},
		{"a\r\nb\tc\x07", true, "a\nb\tc\\x07"},
		{"bad \xff byte", false, `bad \xff byte`},
		{"\u009b csi", false, `\x9b csi`},
		{"abc\u202eevil.sh\u2066x\u2069", true, `abc\u202eevil.sh\u2066x\u2069`},
		{"Arabic \u0639\u0631\u0628\u064a stays", false, "Arabic \u0639\u0631\u0628\u064a stays"},
	} {
		if got := escapeControls(tc.in, tc.keepLines); got != tc.want {
			t.Errorf("escapeControls(%q, %v) = %q, want %q", tc.in, tc.keepLines, got, tc.want)
		}
	}
}
