package ledger

import (
	"context"
	"errors"
)

// Pager is what PurgePages needs of a backend. Each method returns errors
// as the backend's Purge should (wrapped in *StoreError).
type Pager interface {
	// Missing returns the keys that have no record, in the order given.
	Missing(ctx context.Context, keys []string) ([]string, error)
	// Page returns up to n candidate keys after cursor, in key order, and
	// which of them are live: in progress, lease expired or not (their
	// processes may still run; in SQL).
	Page(ctx context.Context, cursor string, n int) (keys []string, live map[string]struct{}, err error)
	// Get returns a record without its output, or ErrNotFound.
	Get(ctx context.Context, key string) (*Record, error)
	// Delete removes those of keys that still match the selector (and,
	// without Force, are not live), with their history, and returns how
	// many went, also when it fails part way. more says whether another
	// page follows.
	Delete(ctx context.Context, keys []string, more bool) (int, error)
}

// PurgePages is the walk every backend's Purge makes once it has checked
// req.Selector: candidates are read a page (req.ChunkSize() records) at a
// time, in key order, and each page's deletable keys are handed to
// Delete, which checks the selector again, so that a record that changed
// in between is judged by its new state. It returns the Pager's errors as
// they are; when Delete fails, with the result so far.
func PurgePages(ctx context.Context, req PurgeRequest, p Pager) (*PurgeResult, error) {
	chunk := req.ChunkSize()
	res := &PurgeResult{}
	var err error
	if res.Missing, err = p.Missing(ctx, req.Keys); err != nil {
		return nil, err
	}
	cursor := ""
	for {
		keys, live, err := p.Page(ctx, cursor, chunk)
		if err != nil {
			return nil, err
		}
		if len(keys) == 0 {
			break
		}
		cursor = keys[len(keys)-1]
		del := Deletable(keys, live, req.Force)
		if res.Live, err = LiveRecords(res.Live, keys, live, func(k string) (*Record, error) {
			return p.Get(ctx, k)
		}); err != nil {
			return nil, err
		}
		if req.DryRun {
			res.Keys = append(res.Keys, del...)
			res.Removed += len(del)
		} else if len(del) > 0 {
			n, err := p.Delete(ctx, del, len(keys) == chunk)
			res.Removed += n
			if err != nil {
				return res, err
			}
		}
		if len(keys) < chunk {
			break
		}
	}
	return res, nil
}

// Deletable is a purge page's keys less the live ones, unless force.
func Deletable(keys []string, live map[string]struct{}, force bool) []string {
	if len(live) == 0 || force {
		return keys
	}
	del := make([]string, 0, len(keys))
	for _, k := range keys {
		if _, ok := live[k]; !ok {
			del = append(del, k)
		}
	}
	return del
}

// LiveRecords appends to out the records of a page's live keys, in page
// order, read with get; a key gone meanwhile is skipped. It stops at get's
// first other error.
func LiveRecords(out []*Record, keys []string, live map[string]struct{}, get func(string) (*Record, error)) ([]*Record, error) {
	for _, k := range keys {
		if _, ok := live[k]; !ok {
			continue
		}
		r, err := get(k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// PageRows is what ScanPage needs of a driver's rows.
type PageRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ScanPage collects the (key, live) rows of a purge page; it returns the
// first error of Scan or Err.
func ScanPage(rows PageRows) (keys []string, live map[string]struct{}, err error) {
	for rows.Next() {
		var (
			k      string
			isLive bool
		)
		if err := rows.Scan(&k, &isLive); err != nil {
			return nil, nil, err
		}
		keys = append(keys, k)
		if isLive {
			if live == nil {
				live = make(map[string]struct{})
			}
			live[k] = struct{}{}
		}
	}
	return keys, live, rows.Err()
}
