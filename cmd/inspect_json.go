package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/ledger"
)

// recordJSON is one record in `idem inspect --json`. docs/operators.md documents
// every field; add fields, never rename or remove them.
type recordJSON struct {
	Key             string     `json:"key"`
	Status          string     `json:"status"`
	Attempts        int        `json:"attempts"`
	MaxAttempts     int        `json:"max_attempts"`
	ExitCode        *int       `json:"exit_code"`
	ExitSource      *string    `json:"exit_source"`
	Replays         int64      `json:"replays"`
	LastReplay      *string    `json:"last_replay"`
	Created         string     `json:"created"`
	Started         string     `json:"started"`
	Finished        *string    `json:"finished"`
	DurationMS      *int64     `json:"duration_ms"`
	TTLMS           *int64     `json:"ttl_ms"`
	Expires         *string    `json:"expires"`
	Expired         bool       `json:"expired"`
	Command         []string   `json:"command"`
	Fingerprint     string     `json:"fingerprint"`
	OutputStored    bool       `json:"output_stored"`
	StdoutTruncated bool       `json:"stdout_truncated"`
	StderrTruncated bool       `json:"stderr_truncated"`
	Owner           *ownerJSON `json:"owner"`
	Class           *string    `json:"class"`
	Reason          *string    `json:"reason"`
	StderrLastLine  *string    `json:"stderr_last_line"`
	Cwd             *string    `json:"cwd"`
	User            *string    `json:"user"`
}

// ownerJSON is the lease holder of an in_progress record.
type ownerJSON struct {
	Host         string `json:"host"`
	PID          int    `json:"pid"`
	Token        int64  `json:"token"`
	LeaseExpires string `json:"lease_expires"`
	LeaseExpired bool   `json:"lease_expired"`
	ChildPGID    *int   `json:"child_pgid"`
}

// detailJSON is `idem inspect KEY --json`: the record plus its history.
type detailJSON struct {
	recordJSON
	StdoutBytes int           `json:"stdout_bytes"`
	StderrBytes int           `json:"stderr_bytes"`
	StderrTail  *string       `json:"stderr_tail"`
	History     []attemptJSON `json:"history"`
}

// attemptJSON is one attempt in the history.
type attemptJSON struct {
	N          int     `json:"n"`
	Token      int64   `json:"token"`
	Host       string  `json:"host"`
	PID        int     `json:"pid"`
	Started    string  `json:"started"`
	Ended      *string `json:"ended"`
	DurationMS *int64  `json:"duration_ms"`
	ExitCode   *int    `json:"exit_code"`
	Class      *string `json:"class"`
	DelayMS    int64   `json:"delay_ms"`
	StderrTail *string `json:"stderr_tail"`
}

func jsonTime(t time.Time) string { return t.UTC().Format(timeFormat) }

func jsonTimeOrNull(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := jsonTime(t)
	return &s
}

func ptr[T any](v T) *T { return &v }

func toRecordJSON(r *ledger.Record, now time.Time) recordJSON {
	j := recordJSON{Key: r.Key, Status: string(r.Status), Attempts: r.Attempts, MaxAttempts: r.MaxAttempts,
		Replays: r.Replays, LastReplay: jsonTimeOrNull(r.LastReplay), Created: jsonTime(r.Created),
		Started: jsonTime(r.Started), Finished: jsonTimeOrNull(r.Finished), Expires: jsonTimeOrNull(r.Expires),
		Expired: r.Expired(now), Command: r.Command, Fingerprint: r.Fingerprint, OutputStored: r.OutputStored,
		StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated}
	if j.Command == nil {
		j.Command = []string{}
	}
	if r.HasExit {
		j.ExitCode, j.ExitSource = ptr(r.ExitCode), ptr(r.ExitSource)
	}
	if !r.Finished.IsZero() {
		j.DurationMS = ptr(r.Duration.Milliseconds())
	}
	if r.TTL > 0 {
		j.TTLMS = ptr(r.TTL.Milliseconds())
	}
	j.Class, j.StderrLastLine, j.Cwd, j.User = nonEmpty(r.Class), nonEmpty(r.Reason), nonEmpty(r.Cwd), nonEmpty(r.User)
	j.Reason = nonEmpty(reason(r))
	if r.Status == ledger.StatusInProgress {
		o := &ownerJSON{Host: r.Owner.Host, PID: r.Owner.PID, Token: r.Token, LeaseExpires: jsonTime(r.LeaseExpiry),
			LeaseExpired: !r.Live(now, nil)}
		if r.Owner.ChildPGID != 0 {
			o.ChildPGID = ptr(r.Owner.ChildPGID)
		}
		j.Owner = o
	}
	return j
}

func toAttemptJSON(h ledger.Attempt) attemptJSON {
	j := attemptJSON{N: h.N, Token: h.Token, Host: h.Host, PID: h.PID, Started: jsonTime(h.Started),
		Ended: jsonTimeOrNull(h.Ended), DelayMS: h.Delay.Milliseconds()}
	if !h.Ended.IsZero() {
		j.DurationMS = ptr(h.Ended.Sub(h.Started).Milliseconds())
	}
	if h.HasExit {
		j.ExitCode = ptr(h.ExitCode)
	}
	if h.Class != "" {
		j.Class = ptr(h.Class)
	}
	if h.StderrTail != nil {
		j.StderrTail = ptr(string(h.StderrTail))
	}
	return j
}

// nonEmpty is s, or null when it is empty.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// writeJSON prints v indented, with a final newline, leaving <, > and &
// as they are.
func writeJSON(w io.Writer, v any) error {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return &exitError{code: exitcode.IOErr, msg: fmt.Sprintf("write JSON: %v", err)}
	}
	return nil
}
