package postgres

import (
	"context"
	"fmt"
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

// now is the time parameter of every statement: the caller's clock when
// Now is set, else NULL, which the SQL turns into clock_timestamp().
func (p *Ledger) now() any {
	if p.Now == nil {
		return nil
	}
	return p.Now()
}

// nowSQL is the SQL for "now" given the parameter now() fills.
func nowSQL(param int) string {
	return fmt.Sprintf("coalesce($%d::timestamptz, pg_catalog.clock_timestamp())", param)
}

// usTime scans microseconds since the epoch into a time; NULL is the zero
// time.
type usTime struct{ t *time.Time }

func (u *usTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*u.t = time.Time{}
	case int64:
		*u.t = time.UnixMicro(v)
	default:
		return fmt.Errorf("a time as microseconds: got %T", src)
	}
	return nil
}

// epochUS is the SQL for a timestamptz expression as microseconds since
// the epoch, which usTime scans.
func epochUS(expr string) string {
	return "(extract(epoch FROM " + expr + ") * 1e6)::bigint"
}

// tsArg is a nullable timestamptz parameter: the zero time is NULL.
func tsArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

func micros(d time.Duration) int64 { return d.Microseconds() }

// clock returns the ledger's now: Now when set, else the server's clock.
func (p *Ledger) clock(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := p.db.QueryRow(ctx, `SELECT `+epochUS(nowSQL(1)), p.now()).Scan(&usTime{&now})
	return now, err
}
