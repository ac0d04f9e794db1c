package runner

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// TestAttemptedReports: Options.Attempted hears of every attempt's start
// and of its recorded end, with the invocation's token, in order: a
// transient end with the backoff that follows it, the final end with the
// key's outcome and the attempt's output; a replay, nothing.
func TestAttemptedReports(t *testing.T) {
	g := newLoopRig(t)
	var got []string
	o := g.options("loop:attempted", count+`echo "err $n" >&2; [ "$n" -ge 2 ] || exit 75`)
	o.Attempted = func(r AttemptReport) {
		if !r.Ended {
			got = append(got, fmt.Sprintf("start %d/%d token %d", r.Attempt, r.MaxAttempts, r.Token))
			return
		}
		got = append(got, fmt.Sprintf("end %d code %d %s %s delay %s final %v out %q err %q", r.Attempt, r.ExitCode,
			r.Class, r.Status, r.Delay, r.Final(), r.Stdout, r.Stderr))
	}
	res := g.run(o)
	if res.Status != ledger.StatusSucceeded {
		t.Fatalf("result %+v", res)
	}
	want := []string{
		"start 1/3 token 1",
		`end 1 code 75 transient retryable delay 1s final false out "attempt 1\n" err "err 1\n"`,
		"start 2/3 token 1",
		`end 2 code 0 success succeeded delay 0s final true out "attempt 2\n" err "err 2\n"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("reports:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	got = nil
	if res := g.run(o); !res.Replayed || len(got) != 0 {
		t.Errorf("a replay: %+v, reports %q", res, got)
	}

	// the deadline leaves no time for the backoff: the end is told once,
	// retryable, with no attempt to follow
	o = g.options("loop:attempted-deadline", count+`exit 75`)
	o.Deadline = 500 * time.Millisecond
	g.clock.limit(o.Deadline)
	o.Attempted = func(r AttemptReport) {
		if r.Ended {
			got = append(got, fmt.Sprintf("end %d %s delay %s final %v", r.Attempt, r.Status, r.Delay, r.Final()))
		}
	}
	g.run(o)
	if want := "end 1 retryable delay 0s final false"; strings.Join(got, "\n") != want {
		t.Errorf("reports %q, want %q", got, want)
	}
}
