package ledger

import (
	"strings"
)

// Counters are counts that only grow: each record keeps its own (written
// by the transactions that already write it, so no row is shared by a
// fleet's runs), and what a record held when it was purged or expired is
// added to the ledger's totals, so a sum over both never goes down.
type Counters struct {
	Replays int64 // duplicates suppressed
	// Runs that recorded an outcome, by the outcome's status.
	RunsSucceeded, RunsFailed, RunsRetryable int64
	// Attempts that ended, by class.
	AttemptsSuccess, AttemptsTransient, AttemptsPermanent   int64
	AttemptsAbandoned, AttemptsInterrupted, AttemptsTimeout int64
}

// CounterColumns names the columns that hold Counters, in the order of
// Counters.Fields, in both backends' records and totals tables.
const CounterColumns = `replays, runs_succeeded, runs_failed, runs_retryable, att_success, att_transient,
	att_permanent, att_abandoned, att_interrupted, att_timeout`

// Fields returns pointers to c's counts in the order of CounterColumns,
// for scanning.
func (c *Counters) Fields() []any {
	return []any{&c.Replays, &c.RunsSucceeded, &c.RunsFailed, &c.RunsRetryable, &c.AttemptsSuccess,
		&c.AttemptsTransient, &c.AttemptsPermanent, &c.AttemptsAbandoned, &c.AttemptsInterrupted, &c.AttemptsTimeout}
}

// Add adds o to c.
func (c *Counters) Add(o Counters) {
	dst, src := c.Fields(), o.Fields()
	for i := range dst {
		*dst[i].(*int64) += *src[i].(*int64)
	}
}

// AttemptClasses are the attempt classes in the order of the att_ columns.
var AttemptClasses = [...]string{ClassSuccess, ClassTransient, ClassPermanent, ClassAbandoned, ClassInterrupted, ClassTimeout}

// BumpSQL is the SET clause, the same in both backends' dialects, that
// counts an ended attempt of class and, when status is set, a run that
// ended with it. Column names come from fixed lists, never from the
// caller's text.
func BumpSQL(class string, status Status) string {
	var b strings.Builder
	for _, c := range AttemptClasses {
		if c == class {
			b.WriteString(`, att_` + c + ` = att_` + c + ` + 1`)
		}
	}
	switch status {
	case StatusSucceeded, StatusFailed, StatusRetryable:
		b.WriteString(`, runs_` + string(status) + ` = runs_` + string(status) + ` + 1`)
	}
	return b.String()
}

// SumCountersSQL sums the counter columns (of table alias t, when set),
// 0 over no rows, in both backends' dialects.
func SumCountersSQL(t string) string {
	var b strings.Builder
	for i, c := range strings.Split(CounterColumns, ",") {
		if i > 0 {
			b.WriteString(", ")
		}
		c = strings.TrimSpace(c)
		if t != "" {
			c = t + "." + c
		}
		b.WriteString("coalesce(sum(" + c + "), 0)")
	}
	return b.String()
}
