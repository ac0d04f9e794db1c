package ledger

import "time"

// Action is what a backend's Reserve does with a key, as Decide says.
type Action int

// The actions of Decide.
const (
	// ActCreate creates the record with its first attempt; Decision.Expired
	// says an expired record is deleted first.
	ActCreate Action = iota + 1
	// ActTake makes the caller the owner of the existing record, with
	// attempt Decision.Done+1; when Decision.Abandoned is set, the open
	// attempt of the previous owner is ended first as abandoned
	// (AbandonedExitCode, ClassAbandoned).
	ActTake
	// ActReplay counts a replay of the record, which is final as it is.
	ActReplay
	// ActClose makes a retryable record whose budget is spent final
	// (failed, with the request's MaxAttempts), then replays it.
	ActClose
	// ActAbandon ends the open attempt of a dead or expired owner as
	// abandoned and, as that was the budget's last attempt, makes the
	// record final: failed, AbandonedExitCode, source idem, a fresh token,
	// finished now. Then it replays it. Decision.Abandoned is that owner.
	ActAbandon
	// ActBusy answers Busy: a live owner holds the key.
	ActBusy
	// ActMismatch refuses the request with Decision.Err, a *MismatchError.
	ActMismatch
)

var actionNames = [...]string{ActCreate: "create", ActTake: "take", ActReplay: "replay", ActClose: "close",
	ActAbandon: "abandon", ActBusy: "busy", ActMismatch: "mismatch"}

func (a Action) String() string {
	if a > 0 && int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "Action(?)"
}

// Decision is Decide's answer: what to do, and what the backend needs to
// do it.
type Decision struct {
	Action Action
	// Expired: the record counts as absent; delete it (with its history)
	// before ActCreate.
	Expired bool
	// Done is the number of attempts already made (ActTake): the new
	// attempt is Done+1.
	Done int
	// Prev is the state Release restores if the taken attempt never starts
	// (ActTake); nil for ActCreate, where Release removes the record.
	Prev *Snapshot
	// Abandoned is the previous owner whose lease is taken over (ActTake,
	// ActAbandon): its child's process group must be stopped before
	// anything runs, and the Reservation says who it was.
	Abandoned *Owner
	// Err is the *MismatchError of ActMismatch.
	Err error
}

// Outcome is the Reserve outcome d leads to.
func (d Decision) Outcome() Outcome {
	switch d.Action {
	case ActCreate, ActTake:
		return Reserved
	case ActBusy:
		return Busy
	case ActMismatch:
		return 0
	}
	return Replay
}

// Answer is Reserve's answer when d needs no write: Busy, naming rec's
// holder, or d.Err for a mismatch. ok is false for every other action.
func (d Decision) Answer(rec *Record) (res *Reservation, ok bool, err error) {
	switch d.Action {
	case ActBusy:
		return &Reservation{Outcome: Busy, Record: rec}, true, nil
	case ActMismatch:
		return nil, true, d.Err
	}
	return nil, false, nil
}

// Decide states the reservation rules: given key's record (nil when there
// is none), the request and the ledger's now, what Reserve does. Both
// backends execute its answer under their own lock; a backend may run a
// case as a single statement only if the conformance suite shows that it
// agrees with Decide.
//
//   - no record, or an expired one: create;
//   - another fingerprint: mismatch, whatever the state;
//   - succeeded: replay;
//   - failed: replay, or with RerunFailed take it with a fresh budget;
//   - retryable: take it, continuing the attempt count, or, the budget
//     spent, close it (final) and replay;
//   - in progress: busy while its owner is live (Record.Live); else the
//     owner abandoned it: take it over, or, when that was the budget's
//     last attempt, make it final (code AbandonedExitCode) and replay.
func Decide(rec *Record, req ReserveRequest, now time.Time) Decision {
	if rec == nil {
		return Decision{Action: ActCreate}
	}
	if rec.Expired(now) {
		return Decision{Action: ActCreate, Expired: true}
	}
	if rec.Fingerprint != req.Fingerprint {
		return Decision{Action: ActMismatch, Err: &MismatchError{Record: rec}}
	}
	switch rec.Status {
	case StatusSucceeded:
		return Decision{Action: ActReplay}
	case StatusFailed:
		if !req.RerunFailed {
			return Decision{Action: ActReplay}
		}
		return Decision{Action: ActTake, Done: 0, Prev: rec.Snapshot()}
	case StatusRetryable:
		if rec.Attempts >= req.MaxAttempts {
			return Decision{Action: ActClose}
		}
		return Decision{Action: ActTake, Done: rec.Attempts, Prev: rec.Snapshot()}
	}
	if rec.Live(now, req.OwnerDead) {
		return Decision{Action: ActBusy}
	}
	abandoned := rec.Owner
	if rec.Attempts >= req.MaxAttempts {
		return Decision{Action: ActAbandon, Abandoned: &abandoned}
	}
	// Should the taker never start its command, the record goes back to
	// what the lost attempt made it: retryable, ended as abandoned.
	prev := rec.Snapshot()
	prev.Status, prev.ExitCode, prev.HasExit = StatusRetryable, AbandonedExitCode, true
	return Decision{Action: ActTake, Done: rec.Attempts, Prev: prev, Abandoned: &abandoned}
}
