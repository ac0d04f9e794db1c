package ledger

import (
	"strings"
	"time"
)

// MetricsRequest says how Metrics groups keys.
type MetricsRequest struct {
	// Separator ends a key's group: the group is the key up to its first
	// Separator (the whole key when it has none). "" means ":".
	Separator string
	// MaxGroups caps the groups reported one by one; the rest are folded
	// into Metrics.Other. 0 means DefaultMaxGroups.
	MaxGroups int
}

// DefaultMaxGroups is MetricsRequest.MaxGroups when it is not set.
const DefaultMaxGroups = 50

// Sep is r.Separator, or ":" when it is not set.
func (r MetricsRequest) Sep() string {
	if r.Separator == "" {
		return ":"
	}
	return r.Separator
}

// Groups is r.MaxGroups, or DefaultMaxGroups when it is not set.
func (r MetricsRequest) Groups() int {
	if r.MaxGroups <= 0 {
		return DefaultMaxGroups
	}
	return r.MaxGroups
}

// GroupSuccess is the time of a key group's last success.
type GroupSuccess struct {
	Group string
	Last  time.Time
}

// Metrics is the ledger's state for monitoring, read at Now (the ledger's
// clock).
type Metrics struct {
	Now time.Time
	// Records counts the records that have not expired, by status.
	Records map[Status]int64
	// Expired counts the records past their TTL (they count as absent).
	Expired int64
	// Stuck counts the in_progress records whose lease has expired: their
	// owner is gone, and the next run of the key takes them over.
	Stuck int64
	// OldestInProgress is when the longest-running in_progress record was
	// reserved; zero when there is none.
	OldestInProgress time.Time
	// LastSuccess is each group's last success (outcome time of its
	// newest succeeded record), in group order, at most MaxGroups of them.
	LastSuccess []GroupSuccess
	// Other is the last success among the groups past MaxGroups (zero
	// when there are none), and OtherGroups how many they are.
	Other       time.Time
	OtherGroups int
	// Counters sums every record's counters and the totals of records
	// that are gone.
	Counters Counters
	// Purged and ExpiredRemoved count the records removed by purge and
	// those dropped when a run found them past their TTL.
	Purged, ExpiredRemoved int64
}

// KeptGroupSep ends the group under which purge keeps a removed record's
// success: the default separator, the one idem key joins parts with.
const KeptGroupSep = ":"

// KeptSuccesses is, for records being removed, each group's newest
// success: the group is the key up to its first KeptGroupSep (the whole
// key without one). Metrics groups them again by its own separator, which
// gives the same groups when that separator comes first in the key, or
// the key has no ':'.
type KeptSuccesses map[string]time.Time

// Add counts the success of key at t.
func (k KeptSuccesses) Add(key string, t time.Time) {
	g, _, _ := strings.Cut(key, KeptGroupSep)
	if prev, ok := k[g]; !ok || t.After(prev) {
		k[g] = t
	}
}

// FoldGroups appends a group's last success to m, or folds it into Other
// once max groups are listed. Backends call it in group order.
func (m *Metrics) FoldGroups(g GroupSuccess, max int) {
	if len(m.LastSuccess) < max {
		m.LastSuccess = append(m.LastSuccess, g)
		return
	}
	m.OtherGroups++
	if g.Last.After(m.Other) {
		m.Other = g.Last
	}
}
