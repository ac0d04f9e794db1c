package ledger

import (
	"context"
	"fmt"
)

// Steps are one backend's writes of a reservation. Execute calls them
// inside the transaction that read the record, under its lock, so each
// step knows the request, the record as read and the ledger's now.
type Steps interface {
	// DeleteExpired removes the expired record with its history and adds
	// what it held to the ledger's totals as expired (ActCreate with
	// Decision.Expired).
	DeleteExpired(ctx context.Context) error
	// Create inserts the record with its first attempt (ActCreate).
	Create(ctx context.Context) (*Reservation, error)
	// EndAbandoned ends the open attempt of the previous owner as
	// abandoned (AbandonedExitCode, ClassAbandoned): ActTake with
	// Decision.Abandoned, and ActAbandon.
	EndAbandoned(ctx context.Context) error
	// Take makes the caller the owner of the record, with attempt done+1;
	// prev is what Release restores, and abandoned says the previous
	// attempt was taken over (ActTake).
	Take(ctx context.Context, done int, prev *Snapshot, abandoned bool) (*Reservation, error)
	// Close makes a retryable record whose budget is spent final
	// (ActClose).
	Close(ctx context.Context) error
	// Abandon makes the record final as abandoned, with a fresh token
	// (ActAbandon).
	Abandon(ctx context.Context) error
	// Replay counts a replay of the record and returns it with its
	// output. changed says a step before it made the record final, so the
	// record as read is stale.
	Replay(ctx context.Context, changed bool) (*Reservation, error)
}

// Execute runs d, Decide's answer for rec, through a backend's steps in
// the one order they allow: the expired record goes before the new one,
// the abandoned attempt ends before its record is taken or made final,
// and a replay counts the record as the other steps left it. Busy and a
// mismatch need no step. The Reservation of a takeover names the owner it
// took over from (Decision.Abandoned).
func Execute(ctx context.Context, d Decision, rec *Record, steps Steps) (*Reservation, error) {
	if res, ok, err := d.Answer(rec); ok {
		return res, err
	}
	switch d.Action {
	case ActCreate:
		if !d.Expired {
			return steps.Create(ctx)
		}
		if err := steps.DeleteExpired(ctx); err != nil {
			return nil, err
		}
		res, err := steps.Create(ctx)
		if res != nil {
			res.Expired = true
		}
		return res, err
	case ActReplay:
		return steps.Replay(ctx, false)
	case ActClose:
		if err := steps.Close(ctx); err != nil {
			return nil, err
		}
		return steps.Replay(ctx, true)
	case ActTake:
		if d.Abandoned != nil {
			if err := steps.EndAbandoned(ctx); err != nil {
				return nil, err
			}
		}
		res, err := steps.Take(ctx, d.Done, d.Prev, d.Abandoned != nil)
		if err != nil {
			return nil, err
		}
		res.Abandoned = d.Abandoned
		return res, nil
	case ActAbandon:
		if err := steps.EndAbandoned(ctx); err != nil {
			return nil, err
		}
		if err := steps.Abandon(ctx); err != nil {
			return nil, err
		}
		res, err := steps.Replay(ctx, true)
		if err != nil {
			return nil, err
		}
		res.Abandoned = d.Abandoned
		return res, nil
	}
	return nil, fmt.Errorf("ledger: no steps for action %v", d.Action)
}
