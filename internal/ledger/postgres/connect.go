package postgres

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/internal/backoff"
	"github.com/idemhq/idem/internal/ledger"
)

// connectBudget bounds how long open retries a connection that fails for a
// passing reason (the server restarting, full, or not answering yet); the
// caller's context (--deadline) may bound it sooner.
const connectBudget = 30 * time.Second

// connector retries the first connection with backoff. Its clock and
// sleep are fields, so that tests drive it without waiting.
type connector struct {
	budget time.Duration
	policy backoff.Policy
	rand   backoff.Rand
	now    func() time.Time
	sleep  func(context.Context, time.Duration) error
	// probe, when set, asks the address what listens there (see probe),
	// once: when a try has not returned within probeAfter, or as soon as
	// one failed in a way PostgreSQL's own failures do not explain.
	probe      func(context.Context) error
	probeAfter time.Duration
}

// probeAfter is how long a first connection may take before idem asks
// what listens on the port. A server near by connects in milliseconds,
// one across the world in a few round trips; a listener that waits for
// its client to speak first in its own protocol (an HTTP server waits for
// a request line, which PostgreSQL's start-up message never completes)
// would otherwise be found out only when the connect timeout ends.
const probeAfter = time.Second

func defaultConnector() connector {
	return connector{
		budget: connectBudget,
		// Many hosts refused at once (too many clients) spread out.
		policy:     backoff.Policy{Initial: 100 * time.Millisecond, Multiplier: 1.6, Max: 3 * time.Second, Jitter: 0.5},
		rand:       rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		now:        time.Now,
		sleep:      sleepCtx,
		probeAfter: probeAfter,
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// connect calls try (one connection attempt, with its own connect
// timeout) until it succeeds, fails for good, or the budget or ctx ends;
// each try's context ends with the budget. It returns the last error.
// A listener that answers as something else than PostgreSQL fails it at
// once (a *mismatchError), whatever the try made of its answer. One that
// takes the connection and says nothing, neither to the try until its
// connect timeout nor to the probe, is not tried again (its error says
// so, errSilent): a port that answers nothing for a whole connect timeout
// is a server that hangs, or one that waits for another protocol, and
// neither passes within the budget, which is for a restart and a full
// server. Those refuse, or answer with an error, and are retried.
func (c connector) connect(ctx context.Context, try func(context.Context) error) error {
	giveUp := c.now().Add(c.budget)
	probe := c.probe
	for n := 1; ; n++ {
		tctx, cancel := context.WithDeadline(ctx, time.Now().Add(giveUp.Sub(c.now())))
		err, verdict, probed := c.tryProbing(ctx, tctx, cancel, try, probe)
		cancel()
		if probed {
			probe = nil
		}
		var mismatch *mismatchError
		switch {
		case errors.As(verdict, &mismatch):
			return verdict
		case err == nil || !transientConnect(err):
			return err
		case errors.Is(verdict, errSilent) && timedOut(err):
			return errors.Join(err, errSilent)
		}
		if ctx.Err() != nil {
			return err
		}
		d := c.policy.Delay(n, c.rand)
		if !c.now().Add(d).Before(giveUp) {
			return err
		}
		if c.sleep(ctx, d) != nil {
			return err
		}
	}
}

// tryProbing runs try with tctx (cancel ends it) and, when probe is set,
// the probe beside it, with ctx, once the try has taken probeAfter, or
// after it failed in a way that the probe may explain (unexplained). A
// probe that finds something other than PostgreSQL ends the try at once.
// It returns
// the try's error, the probe's verdict (nil when it did not run, or found
// PostgreSQL) and whether the probe ran. Nothing is probed on the way of
// a connection that succeeds within probeAfter: no round trip is added
// to a healthy open.
func (c connector) tryProbing(ctx, tctx context.Context, cancel context.CancelFunc, try, probe func(context.Context) error) (err, verdict error, probed bool) {
	if probe == nil {
		return try(tctx), nil, false
	}
	tried := make(chan error, 1)
	go func() { tried <- try(tctx) }()
	// The probe outlives the try's deadline (a silent port is known only
	// once the probe's own wait ends), not the caller's.
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	verdicts := make(chan error, 1)
	startProbe := func() {
		probed = true
		go func() { verdicts <- probe(pctx) }()
	}
	wake := time.NewTimer(c.probeAfter)
	defer wake.Stop()
	done, judged := false, false
	for !done || probed && !judged {
		select {
		case err = <-tried:
			done = true
			if err == nil || !unexplained(err) || ctx.Err() != nil {
				return err, nil, probed // PostgreSQL's own answer, or the caller gave up
			}
			if !probed {
				startProbe()
			}
		case <-wake.C:
			if !probed {
				startProbe()
			}
		case verdict = <-verdicts:
			judged = true
			var mismatch *mismatchError
			if errors.As(verdict, &mismatch) && !done {
				cancel()
				<-tried
				return verdict, verdict, true
			}
		}
	}
	return err, verdict, probed
}

// timedOut reports whether a connection failed for want of an answer in
// time.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err)
}

// unexplained reports whether a connection failure is one that a
// listener other than PostgreSQL may have caused: anything but a refused
// connection (nothing listens), a name that does not resolve, a server's
// own refusal (an ErrorResponse) or a certificate it presented.
func unexplained(err error) bool {
	var (
		pe      *pgconn.PgError
		dns     *net.DNSError
		x509err x509.HostnameError
		unknown x509.UnknownAuthorityError
		invalid x509.CertificateInvalidError
	)
	return !errors.As(err, &pe) && !errors.Is(err, syscall.ECONNREFUSED) && !errors.As(err, &dns) &&
		!errors.As(err, &x509err) && !errors.As(err, &unknown) && !errors.As(err, &invalid)
}

// transientConnect reports whether a connection failed for a reason that
// passes: refused (the server restarting), reset or cut during start-up,
// timed out, too many clients (53300), the server starting up or shutting
// down (57P03, 57P01). A wrong password, a missing database or a name that
// does not resolve does not pass by waiting.
func transientConnect(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch refusalCode(pe) {
		case "53300", "57P03", "57P01":
			return true
		}
		return false
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.IsTimeout || dns.IsTemporary
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err)
}

// connect makes the pool's first connection, retrying failures that pass
// (connector); it stays in the pool for the queries that follow.
func (p *Ledger) connect(ctx context.Context) error {
	c := defaultConnector()
	if !strings.HasPrefix(p.addr, "/") {
		c.probe = func(ctx context.Context) error { return probe(ctx, p.addr) }
	}
	err := c.connect(ctx, func(ctx context.Context) error {
		c, err := p.pool.Acquire(ctx)
		if err == nil {
			c.Release()
		}
		return err
	})
	var (
		ce       *pgconn.ConnectError
		mismatch *mismatchError
	)
	if errors.As(err, &ce) || errors.As(err, &mismatch) || errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		// Also when it timed out, or the retries' budget ended during a try.
		return p.connectError(err)
	}
	return p.wrap("open", err)
}

// Idle implements ledger.Idler: it closes the pool's idle connections.
func (p *Ledger) Idle() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, c := range p.pool.AcquireAllIdle(ctx) {
		c.Conn().Close(ctx) // a closed connection leaves the pool on Release
		c.Release()
	}
}

// connectError explains a failed connection by the host it tried, in one
// line; the password never appears (pgx's messages quote only user and
// database).
func (p *Ledger) connectError(err error) error {
	se := &ledger.StoreError{Op: "connect", Path: p.desc}
	var (
		pe       *pgconn.PgError
		hostname x509.HostnameError
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
	)
	var mismatch *mismatchError
	switch {
	case errors.As(err, &mismatch):
		se.Err = mismatch
		se.Hint = "point the DSN's host and port at PostgreSQL (port 5432 by default) or PgBouncer (6432): that port serves something else"
	case errors.As(err, &pe):
		se.Err = &refusedError{addr: p.addr, pe: pe}
		switch refusalCode(pe) {
		case "startup":
			se.Hint = "remove that parameter from the DSN: a pooler such as PgBouncer passes no start-up parameter on to the server"
		case "28P01", "28000":
			se.Hint = "check the user and password (in PGPASSWORD, a PGPASSFILE or the DSN) and pg_hba.conf"
			if p.passfile != "" {
				se.Hint = passfileWarning(p.passfile)
			}
		case "3D000":
			se.Hint = "create the database, or name an existing one in the DSN"
		case "53300":
			se.Hint = "the server has too many connections; retry, or raise max_connections"
		default:
			se.Hint = "check the DSN, and that PostgreSQL accepts this role and database from this host"
		}
	case errors.As(err, &hostname):
		se.Err = fmt.Errorf("the certificate of PostgreSQL at %s is not valid for %s: %s", p.addr, hostname.Host, hostname.Error())
		se.Hint = "with sslmode=verify-full, name the server by a host name its certificate holds (not an IP address it does not list), or use sslmode=verify-ca"
	case errors.As(err, &unknown), errors.As(err, &invalid):
		se.Err = fmt.Errorf("cannot verify the certificate of PostgreSQL at %s: %s", p.addr, cause(err))
		se.Hint = "set sslrootcert (or PGSSLROOTCERT) to the CA certificate that signed the server's"
	case pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded):
		se.Err = fmt.Errorf("timed out connecting to PostgreSQL at %s", p.addr)
		se.Hint = "check the host and port, that a firewall lets this host through, and that the server (or pooler) answers; connect_timeout in the DSN or PGCONNECT_TIMEOUT sets the wait"
		if errors.Is(err, errSilent) {
			// The port took the connection: no firewall dropped it.
			se.Err = fmt.Errorf("timed out connecting to PostgreSQL at %s: %w", p.addr, errSilent)
			se.Hint = "the server (or pooler) at that port hangs, or something there waits for a protocol other than PostgreSQL's: check the host and port; connect_timeout in the DSN or PGCONNECT_TIMEOUT sets the wait"
		}
	default:
		msg := cause(err)
		switch {
		case strings.Contains(p.addr, "@"):
			se.Hint = encodeHint
		case strings.Contains(msg, "password") && p.passfile != "":
			se.Hint = passfileWarning(p.passfile)
		case strings.Contains(msg, "password"):
			se.Hint = "give the password in PGPASSWORD, a PGPASSFILE or the DSN"
		default:
			se.Hint = "check that PostgreSQL is running and accepts connections at that address"
		}
		se.Err = fmt.Errorf("cannot connect to PostgreSQL at %s: %s", p.addr, msg)
	}
	return se
}

// refusedError is the server's refusal of a connection, which AuthFailed
// recognises.
type refusedError struct {
	addr string
	pe   *pgconn.PgError
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("PostgreSQL at %s refused the connection: %s", e.addr, e.pe.Message)
}

func (e *refusedError) Unwrap() error { return e.pe }

// AuthFailed reports whether err is the server refusing the login: a
// wrong or missing password, or no pg_hba.conf entry for it.
func AuthFailed(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	code := refusalCode(pe)
	return code == "28P01" || code == "28000"
}

// refusalCode is the SQLSTATE of a refused connection as PostgreSQL would
// give it, or "startup" for a start-up parameter refused. A pooler
// (PgBouncer) refuses with protocol_violation (08P01) whatever the reason,
// and the reason only in its message, which it words as PostgreSQL does
// for a missing database and as its own for the rest.
func refusalCode(pe *pgconn.PgError) string {
	if pe.Code != "08P01" {
		return pe.Code
	}
	msg := pe.Message
	switch {
	case strings.HasPrefix(msg, "unsupported startup parameter"):
		return "startup"
	case strings.Contains(msg, "authentication failed"), strings.HasPrefix(msg, "no such user"):
		return "28P01"
	case strings.HasPrefix(msg, "no such database"), strings.HasPrefix(msg, "database ") && strings.HasSuffix(msg, "does not exist"):
		return "3D000"
	case strings.HasPrefix(msg, "no more connections allowed"):
		return "53300"
	case strings.Contains(msg, "cannot connect to server"): // the server behind the pooler is down
		return "57P03"
	}
	return pe.Code
}

// cause names why a connection failed in a few words ("connection
// refused", "no such host") rather than pgx's account of every layer, on
// one line.
func cause(err error) string {
	var (
		errno syscall.Errno
		dns   *net.DNSError
		op    *net.OpError
	)
	switch {
	case errors.As(err, &errno):
		return errno.Error()
	case errors.As(err, &dns):
		return fmt.Sprintf("cannot resolve %s: %s", dns.Name, dns.Err)
	case errors.As(err, &op):
		return op.Err.Error()
	}
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return strings.Join(strings.Fields(err.Error()), " ")
		}
		err = next
	}
}
