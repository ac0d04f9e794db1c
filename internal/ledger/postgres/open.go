// Package postgres is the shared backend of the ledger contract: one
// PostgreSQL database (through pgx) for a fleet of hosts, in a schema of its
// own, with leases on the server's clock and the common reservations as
// single statements. Errors are the contract's: driver errors become
// *ledger.StoreError with a hint, and never show a password.
package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/ledger"
)

const (
	// Schema is the PostgreSQL schema that holds the ledger unless
	// Options.Schema (IDEM_LEDGER_SCHEMA) names another.
	Schema = "idem"
	// migrateLock is the advisory lock taken around schema creation
	// and migration ("idemmigr").
	migrateLock = int64(0x6964656d6d696772)
	// retries bounds retries of serialization failures, deadlocks and
	// unique violations (the other transaction has finished by then).
	retries = 5
	// connectTimeout applies when neither the DSN nor PGCONNECT_TIMEOUT
	// sets one, so an unreachable server fails instead of hanging.
	connectTimeout = 10 * time.Second
	// maxConns: idem itself needs one; the rest serve concurrent callers.
	maxConns = 4
)

var _ ledger.Ledger = (*Ledger)(nil)

// Ledger is the shared ledger: one PostgreSQL database for a fleet of
// hosts, with the contract of the SQLite backend. Leases, TTLs and every
// other time come from the server's clock (clock_timestamp()), so hosts
// with skewed clocks still agree on when a lease expires.
type Ledger struct {
	pool   *pgxpool.Pool
	db     pinned // pool, with search_path pinned: every statement but VACUUM goes through it
	schema string
	// sql holds the ledger's statements with the schema's name in place
	// (see q).
	sql  *statements
	desc string // the DSN without secrets
	addr string // host:port (or socket) for messages
	// syncCommit is synchronous_commit for the commits that must be
	// durable: a reservation's (its token is handed to a command) and the
	// outcome's; asyncCommit for the others (renewals, replays).
	syncCommit, asyncCommit string
	// passfile is a password file ignored for its permissions ("": none).
	passfile string
	// beside: create the ledger even beside another schema's
	// (Options.Beside).
	beside bool
	// rehome: Options.Rehome.
	rehome bool
	// id is the ledger's identity: its schema's creation time (meta.created,
	// microseconds), read at open.
	id string
	// before is the schema version the ledger had at open (0: none).
	before int
	// clockOffset is the server's clock less this host's, measured at
	// open (ServerNow).
	clockOffset time.Duration
	// Now, when set, replaces the server's clock (the conformance suite
	// drives time through it). Nil: clock_timestamp() on the server.
	Now func() time.Time
}

// Open connects to the database dsn names and creates or migrates
// the ledger's schema (Schema) on first use. Passwords come from the DSN, PGPASSWORD
// or a password file (PGPASSFILE, ~/.pgpass), as with libpq. A ledger
// whose schema needs a newer idem is refused untouched. Every error is a
// *StoreError whose message names the host and never the password.
func Open(ctx context.Context, dsn string) (*Ledger, error) {
	return open(ctx, dsn, Schema, Options{}, migrations)
}

// Options says how OpenWith opens a PostgreSQL ledger: the backends'
// common options and those only a database has.
type Options struct {
	ledger.Options
	// Schema is the PostgreSQL schema that holds the ledger ("": idem's
	// default, Schema).
	Schema string
	// Beside creates a ledger even where another one lives beside it (in
	// another schema of the database), as asked for explicitly ('idem
	// schema --apply'). Without it such a creation is refused: a host with
	// a forgotten IDEM_LEDGER_SCHEMA would otherwise start a second ledger
	// and split its fleet.
	Beside bool
	// Rehome opens a ledger restored from a backup (which a run
	// refuses) so that it can be made this one's (see Apply).
	Rehome bool
}

// OpenWith is Open as opts says: the ledger is in schema opts.Schema
// (Schema when empty; see CheckSchemaName); with opts.ReadOnly no DDL runs
// (no schema is created or migrated), and with opts.ReadOnly or
// opts.Existing a database without the ledger's schema is a *StoreError
// wrapping ledger.ErrNoLedger. Every error is a *StoreError.
func OpenWith(ctx context.Context, dsn string, opts Options) (*Ledger, error) {
	schema := opts.Schema
	if schema == "" {
		schema = Schema
	}
	if err := CheckSchemaName(schema); err != nil {
		return nil, &ledger.StoreError{Op: "open", Path: redactDSN(dsn), Err: err,
			Hint: "IDEM_LEDGER_SCHEMA takes lower-case letters, digits and _, not starting with a digit"}
	}
	return open(ctx, dsn, schema, opts, migrations)
}

// CheckSchemaName accepts the names a schema of the ledger may have: a
// lower-case SQL identifier of at most 63 bytes, which needs no quoting
// and is the same name in psql, in grants and in idem.
func CheckSchemaName(name string) error {
	ok := name != "" && len(name) <= 63 && !strings.HasPrefix(name, "pg_")
	for i, c := range name {
		if !(c == '_' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("invalid schema name %q", name)
	}
	return nil
}

// open opens the ledger in schema (tests use one schema each) with the
// given migrations (tests give it more).
func open(ctx context.Context, dsn, schema string, opts Options, migrations []ledger.Migration) (*Ledger, error) {
	desc := redactDSN(dsn)
	cfg, passfile, err := parseConfig(dsn, desc)
	if err != nil {
		return nil, err
	}
	cc := cfg.ConnConfig
	// No start-up parameter but application_name, which poolers accept
	// (PgBouncer refuses search_path, bytea_output, synchronous_commit
	// ...), and no session state: a pooler in transaction mode hands each
	// transaction whichever server connection is free. Tables are named
	// with their schema, and results whose text depends on the session
	// (timestamps on DateStyle, bytea on bytea_output) are read through
	// explicit casts (see recordColumns).
	params := cc.RuntimeParams
	if _, ok := getParam(params, "application_name"); !ok {
		setParam(params, "application_name", "idem")
	}
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = connectTimeout
	}
	// Durability: the outcome and a reservation pay for a WAL flush (they
	// commit with synchronous_commit on, set for their own transaction): a
	// reservation's token is handed to the command, and must never be
	// handed out again after a crash of the server. A renewal or replay
	// count lost with the server costs nothing of the kind, so those
	// commit asynchronously (set for their own transaction too). A DSN
	// that sets synchronous_commit itself gets exactly what it says,
	// everywhere: per transaction too, not as a start-up parameter, which
	// a pooler refuses.
	syncCommit, asyncCommit := "on", "off"
	if v, ok := getParam(params, "synchronous_commit"); ok {
		syncCommit, asyncCommit = v, v
		delParam(params, "synchronous_commit")
	}
	// One round trip per statement (no named prepared statements, which a
	// short-lived idem would prepare once and never use again), unless the
	// DSN says otherwise.
	if !dsnSets(dsn, "default_query_exec_mode") {
		cc.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	cfg.MaxConns = maxConns
	cfg.MinConns = 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, &ledger.StoreError{Op: "open", Path: desc, Err: err}
	}
	p := &Ledger{pool: pool, db: pinned{pool}, schema: schema, beside: opts.Beside, rehome: opts.Rehome, sql: newStatements(schema), desc: desc, addr: hostAddr(&cc.Config),
		syncCommit: syncCommit, asyncCommit: asyncCommit, passfile: passfile}
	if err := p.connect(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if err := p.checkSchema(ctx, migrations, opts.Options); err != nil {
		pool.Close()
		return nil, err
	}
	return p, nil
}

// Describe returns the DSN without its password, and the schema when it
// is not the default.
func (p *Ledger) Describe() string {
	if p.schema != Schema {
		// Ledgers in other schemas of one database are told apart.
		return p.desc + " (schema " + p.schema + ")"
	}
	return p.desc
}

// Close closes the connections.
func (p *Ledger) Close() error {
	p.pool.Close()
	return nil
}

// Identity is the ledger's identity: the same for every host and every
// spelling of the DSN, different for another database or schema (see
// ledger.Identity).
func (p *Ledger) Identity() string { return p.id }
