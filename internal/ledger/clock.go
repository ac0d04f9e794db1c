package ledger

import "time"

// ServerClock is implemented by a ledger whose records are stamped by
// another machine's clock (a database server's): its times are compared
// with that clock, never with this host's.
type ServerClock interface {
	// ServerNow is the ledger's clock now, as measured when it was opened.
	ServerNow() time.Time
}

// NowOf is the time on the clock that stamps l's records: the server's for
// a ledger that implements ServerClock, else local's (time.Now, or a
// test's clock).
func NowOf(l Ledger, local func() time.Time) time.Time {
	if c, ok := l.(ServerClock); ok {
		return c.ServerNow()
	}
	return local()
}

// Idler is implemented by a ledger that holds server connections: Idle
// closes those not in use, so that a long job does not keep a server's
// connection while its command runs (the next call connects again).
type Idler interface {
	Idle()
}
