package postgres

import (
	"time"

	"github.com/jackc/pgx/v5"
)

// serverClock measures the server's clock against this host's from one
// query that returns clock_timestamp() as its last column, in microseconds
// since the epoch (a timestamp's text depends on the session's DateStyle).
type serverClock struct {
	offset time.Duration
}

// read runs query, scans its row into dest and the server's clock, and
// takes the offset as from the middle of the round trip.
func (c *serverClock) read(query func() pgx.Row, dest ...any) error {
	sent := time.Now()
	var server int64
	if err := query().Scan(append(dest, &server)...); err != nil {
		return err
	}
	got := time.Now()
	c.offset = time.UnixMicro(server).Sub(sent.Add(got.Sub(sent) / 2))
	return nil
}

// ServerNow implements ledger.ServerClock: this host's clock moved by the
// offset measured at open (or Now, when a test sets it). Times shown or
// compared against the ledger's records (lease expiries, ages, --since)
// use it, so that a host whose clock is off agrees with the server.
func (p *Ledger) ServerNow() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now().Add(p.clockOffset).Round(0)
}
