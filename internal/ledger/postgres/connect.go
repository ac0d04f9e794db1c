package postgres

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/internal/backoff"
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
}

func defaultConnector() connector {
	return connector{
		budget: connectBudget,
		// Many hosts refused at once (too many clients) spread out.
		policy: backoff.Policy{Initial: 100 * time.Millisecond, Multiplier: 1.6, Max: 3 * time.Second, Jitter: 0.5},
		rand:   rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		now:    time.Now,
		sleep:  sleepCtx,
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
func (c connector) connect(ctx context.Context, try func(context.Context) error) error {
	giveUp := c.now().Add(c.budget)
	for n := 1; ; n++ {
		tctx, cancel := context.WithDeadline(ctx, time.Now().Add(giveUp.Sub(c.now())))
		err := try(tctx)
		cancel()
		if err == nil || !transientConnect(err) || ctx.Err() != nil {
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
	err := defaultConnector().connect(ctx, func(ctx context.Context) error {
		c, err := p.pool.Acquire(ctx)
		if err == nil {
			c.Release()
		}
		return err
	})
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
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
