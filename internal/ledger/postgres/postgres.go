// Package postgres is the shared backend of the ledger contract: one
// PostgreSQL database (through pgx) for a fleet of hosts, in a schema of its
// own, with leases on the server's clock and the common reservations as
// single statements. Errors are the contract's: driver errors become
// *ledger.StoreError with a hint, and never show a password.
package postgres

import (
	"context"
	_ "embed" // schema.sql
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/ledger"
)

//go:embed schema.sql
var schemaV1 string

//go:embed schema_v2.sql
var schemaV2 string

// SchemaVersion is the schema version this idem writes: the number of its
// migrations.
const SchemaVersion = 2

// migrations are the schema's changes in merge order (see the ledger
// package doc). Table meta holds where a ledger stands: version, and
// compat once a migration makes the two differ (a ledger without the
// column has compat = version).
var migrations = []ledger.Migration{
	{Version: 1, Compat: 1, SQL: schemaV1},
	{Version: 2, Compat: 1, SQL: schemaV2},
}

const (
	// Schema is the PostgreSQL schema that holds the ledger unless
	// ledger.Options.Schema (IDEM_LEDGER_SCHEMA) names another.
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
	// (ledger.Options.Beside).
	beside bool
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
	return open(ctx, dsn, Schema, ledger.Options{}, migrations)
}

// OpenWith is Open as opts says: the ledger is in schema opts.Schema
// (Schema when empty; see CheckSchemaName); with opts.ReadOnly no DDL runs
// (no schema is created or migrated), and with opts.ReadOnly or
// opts.Existing a database without the ledger's schema is a *StoreError
// wrapping ledger.ErrNoLedger. Every error is a *StoreError.
func OpenWith(ctx context.Context, dsn string, opts ledger.Options) (*Ledger, error) {
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
func open(ctx context.Context, dsn, schema string, opts ledger.Options, migrations []ledger.Migration) (*Ledger, error) {
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
	p := &Ledger{pool: pool, schema: schema, beside: opts.Beside, sql: newStatements(schema), desc: desc, addr: hostAddr(&cc.Config),
		syncCommit: syncCommit, asyncCommit: asyncCommit, passfile: passfile}
	if err := p.connect(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if err := p.checkSchema(ctx, migrations, opts); err != nil {
		pool.Close()
		return nil, err
	}
	return p, nil
}

// getParam and setParam read and set a run-time parameter whatever the
// case the DSN spelt it in (DateStyle, datestyle): the server would get
// both spellings otherwise.
func getParam(params map[string]string, name string) (string, bool) {
	for k, v := range params {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

func setParam(params map[string]string, name, value string) {
	delParam(params, name)
	params[name] = value
}

func delParam(params map[string]string, name string) {
	for k := range params {
		if strings.EqualFold(k, name) {
			delete(params, k)
		}
	}
}

// dsnSets reports whether the DSN names the parameter.
func dsnSets(dsn, param string) bool {
	_, ok := dsnSetting(dsn, param)
	return ok
}

func hostAddr(c *pgconn.Config) string {
	if strings.HasPrefix(c.Host, "/") {
		return fmt.Sprintf("%s/.s.PGSQL.%d", c.Host, c.Port)
	}
	return net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))
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

// versionsSQL reads a ledger's schema versions from table meta, whose
// compat column exists only once a migration parted the two.
const versionsSQL = `SELECT version, coalesce((to_jsonb(m)->>'compat')::integer, 0) FROM {schema}.meta m`

// checkSchema reads the schema versions; a missing schema is created and
// an older one migrated (unless opts.ReadOnly; a missing one is not
// created with opts.Existing), and one that needs a newer idem refused
// before anything is written. A ledger at this idem's version takes one
// SELECT on meta: a runtime role needs no right to change the schema.
func (p *Ledger) checkSchema(ctx context.Context, migrations []ledger.Migration, opts ledger.Options) error {
	var stored ledger.SchemaVersions
	var created int64
	var clock serverClock
	err := clock.read(func() pgx.Row { return p.pool.QueryRow(ctx, p.q(identitySQL)) }, &stored.Write, &stored.Compat, &created)
	switch {
	case sqlState(err) == "42P01", sqlState(err) == "3F000": // undefined table or schema
		stored = ledger.SchemaVersions{}
	case err != nil:
		return p.wrap("open", err)
	}
	p.before = stored.Write
	pending, err := ledger.PlanSchema(stored, migrations, opts.ReadOnly)
	if err == nil && stored.Write == 0 && opts.Existing {
		err = ledger.ErrNoLedger
	}
	if err != nil {
		return p.schemaErr(err)
	}
	if len(pending) == 0 {
		p.id, p.clockOffset = ledger.MakeIdentity("postgres", uint64(created)), clock.offset
		return nil
	}
	if err := p.migrate(ctx, migrations); err != nil {
		if sqlState(err) == "42501" {
			return p.privilegeErr(ctx, stored.Write, len(migrations), err)
		}
		return err
	}
	if err := clock.read(func() pgx.Row { return p.pool.QueryRow(ctx, p.q(identitySQL)) }, &stored.Write, &stored.Compat, &created); err != nil {
		return p.wrap("open", err)
	}
	p.id, p.clockOffset = ledger.MakeIdentity("postgres", uint64(created)), clock.offset
	return nil
}

// identitySQL is versionsSQL with the ledger's creation time, from which
// its identity is derived, and the server's clock (one round trip at open,
// as before).
const identitySQL = `SELECT version, coalesce((to_jsonb(m)->>'compat')::integer, 0),
	(extract(epoch FROM created) * 1000000)::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint FROM {schema}.meta m`

// Identity is the ledger's identity: the same for every host and every
// spelling of the DSN, different for another database or schema (see
// ledger.Identity).
func (p *Ledger) Identity() string { return p.id }

// schemaErr puts ledger.PlanSchema's errors in a *StoreError.
func (p *Ledger) schemaErr(err error) error {
	return ledger.PlanError(err, p.desc,
		fmt.Sprintf("check --ledger, IDEM_LEDGER and IDEM_LEDGER_SCHEMA: idem run (or 'idem schema --apply') creates schema %q on its first run", p.schema),
		"upgrade idem on this host, or point --ledger at another database")
}

// privilegeErr says that the ledger's schema needs creating or migrating
// and this role may not: a runtime role with the documented grants, whose
// schema its owner applies.
func (p *Ledger) privilegeErr(ctx context.Context, stored, known int, err error) error {
	var pe *pgconn.PgError
	why := ""
	if errors.As(err, &pe) {
		why = ": " + pe.Message
	}
	se := &ledger.StoreError{Op: "open", Path: p.desc,
		Hint: "have the ledger's owner run 'idem schema --apply --grant ROLE' with this idem's version (or print the SQL with 'idem schema')"}
	if stored == 0 {
		se.Err = fmt.Errorf("schema %q has no ledger, and this role may not create one%s", p.schema, why)
		if others, err := otherLedgers(ctx, p.pool, p.schema); err == nil && len(others) > 0 {
			se.Hint = besideHint(others)
		}
	} else {
		se.Err = fmt.Errorf("the ledger in schema %q is at v%d, this idem needs v%d, and this role may not migrate it%s", p.schema, stored, known, why)
	}
	return se
}

// otherLedgers names the schemas of the database, other than schema,
// that hold an idem ledger (from the catalog, which every role may read).
func otherLedgers(ctx context.Context, q queryer, schema string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT n.nspname FROM pg_namespace n WHERE n.nspname <> $1
		AND (SELECT count(*) FROM pg_class c WHERE c.relnamespace = n.oid AND c.relkind = 'r'
			AND c.relname IN ('meta', 'records', 'attempts')) = 3
		ORDER BY 1`, schema)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// queryer is a pool or a transaction.
type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// besideHint points a host at the ledger that is there already.
func besideHint(others []string) string {
	return fmt.Sprintf("this database's ledger is in schema %q: set IDEM_LEDGER_SCHEMA=%s as its other hosts do (a second ledger is made only on purpose, with 'idem schema --apply')",
		others[0], others[0])
}

// refuseBeside refuses to create a ledger in a database that holds one in
// another schema unless asked to (ledger.Options.Beside).
func (p *Ledger) refuseBeside(ctx context.Context, tx pgx.Tx) error {
	others, err := otherLedgers(ctx, tx, p.schema)
	if err != nil || len(others) == 0 {
		return err
	}
	return &ledger.StoreError{Op: "open", Path: p.desc,
		Err:  fmt.Errorf("schema %q has no ledger, and this database holds one in schema %q: idem creates no second ledger beside it unasked", p.schema, others[0]),
		Hint: besideHint(others)}
}

// migrate creates or upgrades the schema in one transaction under an
// advisory lock: hosts that start at once wait for the first, then find the
// schema in place. The migrations name their tables without the schema:
// search_path is set for this transaction only (SET LOCAL), which a
// pooler in transaction mode keeps.
func (p *Ledger) migrate(ctx context.Context, migrations []ledger.Migration) error {
	ident := pgx.Identifier{p.schema}.Sanitize()
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLock); err != nil {
			return err
		}
		var hasSchema, hasMeta bool
		if err := tx.QueryRow(ctx, `SELECT to_regnamespace($1) IS NOT NULL, to_regclass($2) IS NOT NULL`,
			ident, pgx.Identifier{p.schema, "meta"}.Sanitize()).Scan(&hasSchema, &hasMeta); err != nil {
			return err
		}
		var stored ledger.SchemaVersions
		if hasMeta {
			if err := tx.QueryRow(ctx, p.q(versionsSQL)).Scan(&stored.Write, &stored.Compat); err != nil {
				return err
			}
		}
		pending, err := ledger.PlanSchema(stored, migrations, false)
		if err != nil {
			return p.schemaErr(err)
		}
		if len(pending) == 0 {
			return nil // another host got here first
		}
		if stored.Write == 0 && !p.beside {
			if err := p.refuseBeside(ctx, tx); err != nil {
				return err
			}
		}
		if stored.Write == 0 {
			if err := p.createSchema(ctx, tx, hasSchema); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `SELECT set_config('search_path', $1, true)`, ident); err != nil {
			return err
		}
		for _, m := range pending {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("schema v%d: %w", m.Version, err)
			}
		}
		return p.writeVersions(ctx, tx, stored.After(pending), stored.Write == 0)
	})
	var se *ledger.StoreError
	if errors.As(err, &se) || sqlState(err) == "42501" {
		return err
	}
	return p.wrap("create schema", err)
}

// createSchema makes the ledger's schema, or checks that the schema of
// that name is empty.
func (p *Ledger) createSchema(ctx context.Context, tx pgx.Tx, exists bool) error {
	if !exists {
		_, err := tx.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{p.schema}.Sanitize())
		return err
	}
	var objects int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = to_regnamespace($1)`,
		pgx.Identifier{p.schema}.Sanitize()).Scan(&objects); err != nil {
		return err
	}
	if objects > 0 {
		return &ledger.StoreError{Op: "open", Path: p.desc,
			Err:  fmt.Errorf("schema %q holds tables that are not an idem ledger", p.schema),
			Hint: "point --ledger at another database, or drop that schema"}
	}
	return nil
}

// writeVersions records v in table meta: its row is new for a new ledger.
// The compat column is added when the versions first part, and kept
// up to date once it exists.
func (p *Ledger) writeVersions(ctx context.Context, tx pgx.Tx, v ledger.SchemaVersions, fresh bool) error {
	meta := p.q(`{schema}.meta`)
	if fresh {
		if _, err := tx.Exec(ctx, `INSERT INTO `+meta+` (version) VALUES ($1)`, v.Write); err != nil {
			return err
		}
	} else if _, err := tx.Exec(ctx, `UPDATE `+meta+` SET version = $1`, v.Write); err != nil {
		return err
	}
	var hasCompat bool
	if err := tx.QueryRow(ctx, `SELECT to_jsonb(m) ? 'compat' FROM `+meta+` m`).Scan(&hasCompat); err != nil {
		return err
	}
	if !hasCompat && v.Compat == v.Write {
		return nil
	}
	if _, err := tx.Exec(ctx, `ALTER TABLE `+meta+` ADD COLUMN IF NOT EXISTS compat integer`); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE `+meta+` SET compat = $1`, v.Compat)
	return err
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
	return fmt.Sprintf("coalesce($%d::timestamptz, clock_timestamp())", param)
}

// do runs fn, retrying a bounded number of times when PostgreSQL reports a
// serialization failure, a deadlock or a unique violation (the transaction
// it collided with has ended by then), and wraps the error.
func (p *Ledger) do(ctx context.Context, op string, fn func() error) error {
	var err error
	for try := 0; try < retries; try++ {
		err = fn()
		if !retryable(err) || ctx.Err() != nil {
			break
		}
	}
	return p.wrap(op, err)
}

func retryable(err error) bool {
	switch sqlState(err) {
	case "40001", "40P01", "23505":
		return true
	}
	return err != nil && pgconn.SafeToRetry(err)
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// wrap turns driver errors into *StoreError and passes contract errors on.
func (p *Ledger) wrap(op string, err error) error {
	var (
		mismatch *ledger.MismatchError
		se       *ledger.StoreError
		pe       *pgconn.PgError
		ce       *pgconn.ConnectError
	)
	switch {
	case err == nil, errors.Is(err, ledger.ErrNotFound), errors.Is(err, ledger.ErrLeaseLost), errors.As(err, &mismatch), errors.As(err, &se):
		return err
	case errors.As(err, &ce):
		// Before the context's errors: a connect timeout is one.
		return p.connectError(err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &pe):
		return p.serverError(op, pe)
	}
	if connLost(err) {
		return &ledger.StoreError{Op: op, Path: p.desc,
			Err:  fmt.Errorf("lost the connection to PostgreSQL at %s: %s", p.addr, cause(err)),
			Hint: "check that PostgreSQL is running and reachable from this host"}
	}
	return &ledger.StoreError{Op: op, Path: p.desc, Err: err}
}

// connLost reports whether err is the connection failing under us (EOF,
// reset, timeout, closed) rather than a query's own error.
func connLost(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, pgconn.ErrConnClosed) ||
		pgconn.Timeout(err)
}

func (p *Ledger) serverError(op string, pe *pgconn.PgError) error {
	se := &ledger.StoreError{Op: op, Path: p.desc, Err: fmt.Errorf("%s (SQLSTATE %s)", pe.Message, pe.Code)}
	switch {
	case strings.HasPrefix(pe.Code, "08"), pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03":
		se.Err = fmt.Errorf("lost the connection to PostgreSQL at %s: %s", p.addr, pe.Message)
		se.Hint = "check that PostgreSQL is running and reachable from this host"
	case pe.Code == "42501":
		se.Hint = fmt.Sprintf("grant this role the use of the ledger in schema %q: 'idem schema --grant ROLE' prints the grants", p.schema)
	case pe.Code == "42704": // undefined object: only a role is named by the user
		se.Hint = "create that role first (CREATE ROLE NAME LOGIN), or name an existing one"
	case pe.Code == "25006":
		se.Hint = "point --ledger at the primary server, not a read-only standby"
	case pe.Code == "53100":
		se.Hint = "free space on the database server"
	case pe.Code == "40001", pe.Code == "40P01", pe.Code == "55P03":
		se.Hint = "retry; if it persists, look for a long transaction holding the ledger's rows"
	}
	return se
}

// recordColumns are a record's columns for scanRecord. Times are read as
// microseconds since the epoch (usTime) and output as hex (hexBytes, in
// outputColumns): the text of a timestamptz or a bytea depends on the
// session's DateStyle and bytea_output, which a role, a database or a
// pooler may set, and exec mode reads results as text.
const recordColumns = `seq, key, fingerprint, command, status, attempts, max_attempts, exit_code, exit_source, token,
	owner_host, owner_boot_id, owner_pidns, owner_pid, owner_start, child_pgid, child_start,
	(extract(epoch FROM lease_expires) * 1e6)::bigint, (extract(epoch FROM created) * 1e6)::bigint,
	(extract(epoch FROM started) * 1e6)::bigint, (extract(epoch FROM updated) * 1e6)::bigint,
	(extract(epoch FROM finished) * 1e6)::bigint, duration_ms, ttl_ms, (extract(epoch FROM expires) * 1e6)::bigint,
	replays, (extract(epoch FROM last_replay) * 1e6)::bigint,
	output_stored, stdout_truncated, stderr_truncated, coalesce(class, ''), coalesce(reason, ''),
	coalesce(run_cwd, ''), coalesce(run_user, ''), ` + ledger.CounterColumns

// outputColumns follow recordColumns where a record's output is read.
const outputColumns = `encode(stdout, 'hex'), encode(stderr, 'hex')`

func scanRecord(row pgx.Row, extra ...any) (*ledger.Record, error) {
	var (
		r                                  ledger.Record
		command                            []byte
		exit                               pgtype.Int4
		dur                                pgtype.Int8
		ttl, pidns, ownerStart, childStart int64
		status                             string
	)
	dest := []any{&r.Seq, &r.Key, &r.Fingerprint, &command, &status, &r.Attempts, &r.MaxAttempts, &exit, &r.ExitSource, &r.Token,
		&r.Owner.Host, &r.Owner.BootID, &pidns, &r.Owner.PID, &ownerStart, &r.Owner.ChildPGID, &childStart, &usTime{&r.LeaseExpiry},
		&usTime{&r.Created}, &usTime{&r.Started}, &usTime{&r.Updated}, &usTime{&r.Finished}, &dur, &ttl, &usTime{&r.Expires},
		&r.Replays, &usTime{&r.LastReplay},
		&r.OutputStored, &r.StdoutTruncated, &r.StderrTruncated, &r.Class, &r.Reason, &r.Cwd, &r.User}
	dest = append(dest, r.Counters.Fields()...)
	if err := row.Scan(append(dest, extra...)...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, ledger.ErrNotFound
		}
		return nil, err
	}
	if err := json.Unmarshal(command, &r.Command); err != nil {
		return nil, fmt.Errorf("record %q: bad command column: %w", r.Key, err)
	}
	r.Status = ledger.Status(status)
	r.ExitCode, r.HasExit = int(exit.Int32), exit.Valid
	r.Owner.PIDNS, r.Owner.StartTime, r.Owner.ChildStart = uint64(pidns), uint64(ownerStart), uint64(childStart)
	r.Duration = time.Duration(dur.Int64) * time.Millisecond
	r.TTL = time.Duration(ttl) * time.Millisecond
	return &r, nil
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

// hexBytes scans bytes the server sent as hex (encode(x, 'hex')); NULL is
// nil.
type hexBytes struct{ b *[]byte }

func (h *hexBytes) Scan(src any) error {
	var err error
	switch v := src.(type) {
	case nil:
		*h.b = nil
	case string:
		*h.b, err = hex.DecodeString(v)
	case []byte:
		*h.b, err = hex.DecodeString(string(v))
	default:
		err = fmt.Errorf("bytes as hex: got %T", src)
	}
	return err
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

// queryRower is a pool or a transaction.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (p *Ledger) getRecord(ctx context.Context, q queryRower, key string, withOutput bool) (*ledger.Record, error) {
	if !withOutput {
		return scanRecord(q.QueryRow(ctx, p.q(`SELECT `+recordColumns+` FROM {schema}.records WHERE key = $1`), key))
	}
	var stdout, stderr []byte
	r, err := scanRecord(q.QueryRow(ctx, p.q(`SELECT `+recordColumns+`, `+outputColumns+` FROM {schema}.records WHERE key = $1`), key),
		&hexBytes{&stdout}, &hexBytes{&stderr})
	if err != nil {
		return nil, err
	}
	r.Stdout, r.Stderr = stdout, stderr
	return r, nil
}

// Reserve implements Ledger. The common cases are single statements: a
// replay of a final record (UPDATE ... RETURNING), then the claim of a new
// key (INSERT ... ON CONFLICT DO NOTHING RETURNING token, with its first
// attempt). Everything else — continuing a retryable record, rerunning a
// failed one, an expired TTL, a takeover, busy, a fingerprint mismatch —
// needs the record and, for a same-host owner, the OwnerDead callback: it
// runs in one short transaction that locks the row (SELECT ... FOR NO KEY
// UPDATE) before deciding, so no other reservation, renewal or outcome
// interleaves between the read and the write.
func (p *Ledger) Reserve(ctx context.Context, req ledger.ReserveRequest) (*ledger.Reservation, error) {
	command, err := json.Marshal(req.Command)
	if err != nil {
		return nil, &ledger.StoreError{Op: "reserve", Path: p.desc, Err: err}
	}
	var res *ledger.Reservation
	err = p.do(ctx, "reserve", func() error {
		// A record that vanishes between the claim and the lock (purged)
		// sends us round again; a handful of rounds is plenty.
		for round := 0; round < retries; round++ {
			var err error
			if res, err = p.replayFinal(ctx, req); err != nil || res != nil {
				return err
			}
			if res, err = p.create(ctx, p.pool, req, command, p.now()); err != nil || res != nil {
				return err
			}
			if res, err = p.decide(ctx, req, command); err != nil || res != nil {
				return err
			}
		}
		return errors.New("the key kept changing under concurrent runs")
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// replayFinal counts and returns a replay of a succeeded (or final failed)
// record with this fingerprint, in one statement; nil when it is not one.
func (p *Ledger) replayFinal(ctx context.Context, req ledger.ReserveRequest) (*ledger.Reservation, error) {
	var stdout, stderr []byte
	rec, err := scanRecord(p.pool.QueryRow(ctx, p.q(`WITH c AS (SELECT `+nowSQL(4)+` AS now, set_config('synchronous_commit', $5, true) AS sync)
		UPDATE {schema}.records SET replays = replays + 1, last_replay = c.now FROM c
		WHERE key = $1 AND fingerprint = $2 AND (status = 'succeeded' OR (status = 'failed' AND NOT $3::boolean))
			AND (expires IS NULL OR expires > c.now)
		RETURNING `+recordColumns+`, `+outputColumns),
		req.Key, req.Fingerprint, req.RerunFailed, p.now(), p.asyncCommit), &hexBytes{&stdout}, &hexBytes{&stderr})
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rec.Stdout, rec.Stderr = stdout, stderr
	return &ledger.Reservation{Outcome: ledger.Replay, Record: rec}, nil
}

// create claims a key that has no record, with its first attempt, in one
// statement; nil when the key has a record.
func (p *Ledger) create(ctx context.Context, q queryRower, req ledger.ReserveRequest, command []byte, now any) (*ledger.Reservation, error) {
	o := req.Owner
	res := &ledger.Reservation{Outcome: ledger.Reserved, Attempt: 1}
	err := q.QueryRow(ctx, p.q(`WITH c AS (SELECT `+nowSQL(11)+` AS now, set_config('synchronous_commit', $14, true) AS sync), rec AS (
			INSERT INTO {schema}.records (key, fingerprint, command, status, attempts, max_attempts, token,
				owner_host, owner_boot_id, owner_pidns, owner_pid, owner_start, lease_expires, created, started, updated,
				run_cwd, run_user)
			SELECT $1, $2, $3::jsonb, 'in_progress', 1, $4, nextval('{schema}.tokens'), $5, $6, $7, $8, $9,
				c.now + $10::bigint * interval '1 microsecond', c.now, c.now, c.now, $12, $13 FROM c
			ON CONFLICT (key) DO NOTHING
			RETURNING key, token, started)
		INSERT INTO {schema}.attempts (key, n, token, host, pid, started)
		SELECT key, 1, token, $5, $8, started FROM rec
		RETURNING token, id`),
		req.Key, req.Fingerprint, string(command), req.MaxAttempts,
		o.Host, o.BootID, int64(o.PIDNS), o.PID, int64(o.StartTime), micros(req.Lease), now, req.Cwd, req.User, p.syncCommit).Scan(&res.Token, &res.AttemptID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// decide executes ledger.Decide under the row's lock. It returns nil, nil
// when the record vanished before it could be locked.
func (p *Ledger) decide(ctx context.Context, req ledger.ReserveRequest, command []byte) (*ledger.Reservation, error) {
	var res *ledger.Reservation
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		res = nil
		// Lock first, then read the clock: a wait for the lock must not
		// make "now" stale.
		b := &pgx.Batch{}
		// A token drawn here is handed to a command: the commit waits for
		// the WAL flush (SET LOCAL: it ends with the transaction, and so
		// works through a pooler in transaction mode).
		b.Queue(`SELECT set_config('synchronous_commit', $1, true)`, p.syncCommit)
		b.Queue(p.q(`SELECT `+recordColumns+` FROM {schema}.records WHERE key = $1 FOR NO KEY UPDATE`), req.Key)
		b.Queue(`SELECT `+epochUS(nowSQL(1)), p.now())
		br := tx.SendBatch(ctx, b)
		var sync string
		err := br.QueryRow().Scan(&sync)
		var rec *ledger.Record
		if err == nil {
			rec, err = scanRecord(br.QueryRow())
		}
		var now time.Time
		if err == nil {
			err = br.QueryRow().Scan(&usTime{&now})
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if errors.Is(err, ledger.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		st := &reserveSteps{p: p, tx: tx, req: &req, command: command, rec: rec, now: now}
		res, err = ledger.Execute(ctx, ledger.Decide(rec, req, now), rec, st)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// reserveSteps are decide's ledger.Steps: its writes, in the transaction
// that locked and read the record rec at now.
type reserveSteps struct {
	p       *Ledger
	tx      pgx.Tx
	req     *ledger.ReserveRequest
	command []byte
	rec     *ledger.Record
	now     time.Time
}

var _ ledger.Steps = (*reserveSteps)(nil)

// DeleteExpired implements ledger.Steps, in one statement.
func (st *reserveSteps) DeleteExpired(ctx context.Context) error {
	_, err := st.tx.Exec(ctx, st.p.q(`WITH d AS (DELETE FROM {schema}.records WHERE key = $1 RETURNING `+ledger.CounterColumns+`)
		`+addTotalsSQL(`0`, `1`)), st.req.Key)
	return err
}

// Create implements ledger.Steps: the record is gone, so its key takes no
// conflict.
func (st *reserveSteps) Create(ctx context.Context) (*ledger.Reservation, error) {
	res, err := st.p.create(ctx, st.tx, *st.req, st.command, st.now)
	if err == nil && res == nil {
		err = errors.New("re-creating an expired record found a conflict")
	}
	return res, err
}

// EndAbandoned implements ledger.Steps.
func (st *reserveSteps) EndAbandoned(ctx context.Context) error {
	_, err := st.tx.Exec(ctx, st.p.q(`UPDATE {schema}.attempts SET ended = $2, exit_code = $3, class = $4
		WHERE key = $1 AND ended IS NULL`), st.req.Key, st.now, ledger.AbandonedExitCode, ledger.ClassAbandoned)
	return err
}

// Close implements ledger.Steps.
func (st *reserveSteps) Close(ctx context.Context) error {
	_, err := st.tx.Exec(ctx, st.p.q(`UPDATE {schema}.records SET status = 'failed', max_attempts = $2, updated = $3 WHERE key = $1`),
		st.req.Key, st.req.MaxAttempts, st.now)
	return err
}

// Abandon implements ledger.Steps.
func (st *reserveSteps) Abandon(ctx context.Context) error {
	_, err := st.tx.Exec(ctx, st.p.q(`UPDATE {schema}.records SET status = 'failed', exit_code = $2, exit_source = 'idem',
		token = nextval('{schema}.tokens'), max_attempts = $3, finished = $4::timestamptz, updated = $4::timestamptz, duration_ms = $5,
		lease_expires = NULL, expires = CASE WHEN ttl_ms > 0 THEN $4::timestamptz + ttl_ms * interval '1 millisecond' END,
		class = 'abandoned', reason = NULL, att_abandoned = att_abandoned + 1, runs_failed = runs_failed + 1
		WHERE key = $1`),
		st.req.Key, ledger.AbandonedExitCode, st.req.MaxAttempts, st.now, st.now.Sub(st.rec.Started).Milliseconds())
	return err
}

// Take implements ledger.Steps: the record's previous attempts number
// done.
func (st *reserveSteps) Take(ctx context.Context, done int, prev *ledger.Snapshot, abandoned bool) (*ledger.Reservation, error) {
	req, now := st.req, st.now
	o := req.Owner
	res := &ledger.Reservation{Outcome: ledger.Reserved, Prev: prev}
	err := st.tx.QueryRow(ctx, st.p.q(`WITH rec AS (
			UPDATE {schema}.records SET status = 'in_progress', attempts = $2, max_attempts = $3, token = nextval('{schema}.tokens'),
				owner_host = $4, owner_boot_id = $5, owner_pidns = $6, owner_pid = $7, owner_start = $8,
				child_pgid = 0, child_start = 0, lease_expires = $9::timestamptz + $10::bigint * interval '1 microsecond',
				started = $9, updated = $9, finished = NULL, expires = NULL,
				run_cwd = $11, run_user = $12, att_abandoned = att_abandoned + $13::int
			WHERE key = $1 RETURNING key, token, attempts)
		INSERT INTO {schema}.attempts (key, n, token, host, pid, started)
		SELECT key, attempts, token, $4, $7, $9 FROM rec
		RETURNING token, n, id`),
		req.Key, done+1, req.MaxAttempts, o.Host, o.BootID, int64(o.PIDNS), o.PID, int64(o.StartTime), now, micros(req.Lease),
		req.Cwd, req.User, boolInt(abandoned)).
		Scan(&res.Token, &res.Attempt, &res.AttemptID)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Replay implements ledger.Steps: it counts one suppressed duplicate of
// the locked record and returns it with its output, as the UPDATE leaves
// it, whether or not a step changed it before.
func (st *reserveSteps) Replay(ctx context.Context, _ bool) (*ledger.Reservation, error) {
	var stdout, stderr []byte
	rec, err := scanRecord(st.tx.QueryRow(ctx, st.p.q(`UPDATE {schema}.records SET replays = replays + 1, last_replay = $2 WHERE key = $1
		RETURNING `+recordColumns+`, `+outputColumns), st.req.Key, st.now), &hexBytes{&stdout}, &hexBytes{&stderr})
	if err != nil {
		return nil, err
	}
	rec.Stdout, rec.Stderr = stdout, stderr
	return &ledger.Reservation{Outcome: ledger.Replay, Record: rec}, nil
}

// fencedCount turns the row count of an owner's write into ErrLeaseLost.
func fencedCount(n int64, err error) error {
	if err != nil {
		return err
	}
	if n == 0 {
		return ledger.ErrLeaseLost
	}
	return nil
}

func (p *Ledger) execFenced(ctx context.Context, op, sql string, args ...any) error {
	return p.do(ctx, op, func() error {
		tag, err := p.pool.Exec(ctx, sql, args...)
		return fencedCount(tag.RowsAffected(), err)
	})
}

// countFenced runs a statement whose single row is the number of records
// the fenced write touched.
func (p *Ledger) countFenced(ctx context.Context, op, sql string, args ...any) error {
	return p.do(ctx, op, func() error {
		var n int64
		err := p.pool.QueryRow(ctx, sql, args...).Scan(&n)
		return fencedCount(n, err)
	})
}

// SetChild implements Ledger.
func (p *Ledger) SetChild(ctx context.Context, key string, token int64, pgid int, start uint64) error {
	return p.execFenced(ctx, "record child", p.q(`WITH c AS (SELECT set_config('synchronous_commit', $5, true))
		UPDATE {schema}.records SET child_pgid = $3, child_start = $4 FROM c WHERE key = $1 AND token = $2`),
		key, token, pgid, int64(start), p.asyncCommit)
}

// Renew implements Ledger: the lease runs from the server's clock.
func (p *Ledger) Renew(ctx context.Context, key string, token int64, lease time.Duration) error {
	return p.execFenced(ctx, "renew lease", p.q(`WITH c AS (SELECT `+nowSQL(4)+` AS now, set_config('synchronous_commit', $5, true) AS sync)
		UPDATE {schema}.records SET lease_expires = c.now + $3::bigint * interval '1 microsecond', updated = c.now FROM c
		WHERE key = $1 AND token = $2`), key, token, micros(lease), p.now(), p.asyncCommit)
}

// EndAttempt implements Ledger, in one statement.
func (p *Ledger) EndAttempt(ctx context.Context, e ledger.AttemptEnd) error {
	return p.countFenced(ctx, "record attempt", p.q(`WITH c AS (SELECT `+nowSQL(7)+` AS now, set_config('synchronous_commit', $10, true) AS sync),
		r AS (UPDATE {schema}.records SET exit_code = $4, exit_source = 'child', updated = c.now, class = $5, reason = $8`+ledger.BumpSQL(e.Class, "")+` FROM c
			WHERE key = $1 AND token = $2 RETURNING c.now),
		a AS (UPDATE {schema}.attempts SET ended = r.now, exit_code = $4, class = $5, delay_ms = $6, stderr_tail = $9 FROM r
			WHERE id = $3 AND attempts.key = $1)
		SELECT count(*) FROM r`), e.Key, e.Token, e.AttemptID, e.ExitCode, e.Class, e.Delay.Milliseconds(), p.now(),
		ledger.ReasonArg(e.StderrTail), ledger.Tail(e.StderrTail), p.asyncCommit)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// addTotalsSQL adds the counters of the rows of CTE d (records being
// removed) to one of the totals' shards, picked at random, with the SQL
// expressions purged and expired for how many went by each way.
func addTotalsSQL(purged, expired string) string {
	return `INSERT INTO {schema}.totals AS t (shard, ` + ledger.CounterColumns + `, purged, expired)
		SELECT floor(random() * 16)::int, ` + ledger.SumCountersSQL("") + `, ` + purged + `, ` + expired + ` FROM d
		ON CONFLICT (shard) DO UPDATE SET replays = t.replays + excluded.replays,
			runs_succeeded = t.runs_succeeded + excluded.runs_succeeded, runs_failed = t.runs_failed + excluded.runs_failed,
			runs_retryable = t.runs_retryable + excluded.runs_retryable, att_success = t.att_success + excluded.att_success,
			att_transient = t.att_transient + excluded.att_transient, att_permanent = t.att_permanent + excluded.att_permanent,
			att_abandoned = t.att_abandoned + excluded.att_abandoned, att_interrupted = t.att_interrupted + excluded.att_interrupted,
			att_timeout = t.att_timeout + excluded.att_timeout, purged = t.purged + excluded.purged, expired = t.expired + excluded.expired`
}

// StartAttempt implements Ledger, in one statement.
func (p *Ledger) StartAttempt(ctx context.Context, key string, token int64, lease time.Duration) (int, int64, error) {
	var (
		n  int
		id int64
	)
	err := p.do(ctx, "start attempt", func() error {
		err := p.pool.QueryRow(ctx, p.q(`WITH c AS (SELECT `+nowSQL(4)+` AS now, set_config('synchronous_commit', $5, true) AS sync),
			r AS (UPDATE {schema}.records SET attempts = attempts + 1, lease_expires = c.now + $3::bigint * interval '1 microsecond',
				updated = c.now, child_pgid = 0, child_start = 0 FROM c
				WHERE key = $1 AND token = $2 RETURNING key, attempts, owner_host, owner_pid, c.now)
			INSERT INTO {schema}.attempts (key, n, token, host, pid, started)
			SELECT key, attempts, $2, owner_host, owner_pid, now FROM r
			RETURNING n, id`), key, token, micros(lease), p.now(), p.asyncCommit).Scan(&n, &id)
		if errors.Is(err, pgx.ErrNoRows) {
			return ledger.ErrLeaseLost
		}
		return err
	})
	return n, id, err
}

// Finish implements Ledger, in one statement that commits with
// synchronous_commit on (set_config(..., true) lasts to the end of the
// statement's own transaction): once Finish returns nil the outcome is in
// the server's WAL on disk (and on a synchronous standby, if the server
// has one). When the commit's fate is unknown (the connection broke), the
// record is read again: Finish returns nil only if the outcome is there.
func (p *Ledger) Finish(ctx context.Context, req ledger.FinishRequest) error {
	stdout, stderr := req.Output()
	tail := req.Tail()
	err := p.countFenced(ctx, "record outcome", p.q(`WITH c AS (SELECT `+nowSQL(15)+` AS now,
			set_config('synchronous_commit', $16, true) AS sync),
		r AS (UPDATE {schema}.records SET status = $3, exit_code = $4, exit_source = $5, updated = c.now, finished = c.now,
			duration_ms = $6, ttl_ms = $7::bigint,
			expires = CASE WHEN $7::bigint > 0 THEN c.now + $7::bigint * interval '1 millisecond' END,
			lease_expires = NULL, output_stored = $8, stdout = $9, stderr = $10, stdout_truncated = $11, stderr_truncated = $12,
			class = $13, reason = $17`+ledger.BumpSQL(req.Class, req.Status)+`
			FROM c WHERE key = $1 AND token = $2 RETURNING c.now),
		a AS (UPDATE {schema}.attempts SET ended = r.now, exit_code = $4, class = $13, stderr_tail = $18 FROM r WHERE id = $14 AND attempts.key = $1)
		SELECT count(*) FROM r`),
		req.Key, req.Token, string(req.Status), req.ExitCode, req.ExitSource, req.Duration.Milliseconds(), req.TTL.Milliseconds(),
		req.OutputStored, stdout, stderr, req.StdoutTruncated, req.StderrTruncated, req.Class, req.AttemptID, p.now(), p.syncCommit,
		ledger.ReasonArg(tail), tail)
	var se *ledger.StoreError
	if errors.As(err, &se) {
		// The re-read keeps the call's deadline, not its cancellation.
		rctx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
		if d, ok := ctx.Deadline(); ok {
			rctx, cancel = context.WithDeadline(rctx, d)
		}
		defer cancel()
		if req.Landed(p.getRecord(rctx, p.pool, req.Key, false)) {
			return nil
		}
	}
	return err
}

// Release implements Ledger. Restoring the previous state draws a fresh
// token, which fences the releasing owner out: it must not write again.
func (p *Ledger) Release(ctx context.Context, key string, token, attemptID int64, prev *ledger.Snapshot) error {
	if prev == nil {
		// The attempts go with the record (ON DELETE CASCADE).
		return p.execFenced(ctx, "release", p.q(`WITH c AS (SELECT set_config('synchronous_commit', $3, true))
			DELETE FROM {schema}.records USING c WHERE key = $1 AND token = $2`), key, token, p.asyncCommit)
	}
	var code any
	if prev.HasExit {
		code = prev.ExitCode
	}
	return p.countFenced(ctx, "release", p.q(`WITH c AS (SELECT `+nowSQL(10)+` AS now, set_config('synchronous_commit', $11, true) AS sync),
		r AS (UPDATE {schema}.records SET status = $4, attempts = $5, max_attempts = $6, exit_code = $7::integer,
			finished = $8::timestamptz, expires = $9::timestamptz, lease_expires = NULL, child_pgid = 0, child_start = 0,
			updated = c.now, token = nextval('{schema}.tokens') FROM c WHERE key = $1 AND token = $2 RETURNING key),
		a AS (DELETE FROM {schema}.attempts WHERE id = $3 AND key IN (SELECT key FROM r))
		SELECT count(*) FROM r`),
		key, token, attemptID, string(prev.Status), prev.Attempts, prev.MaxAttempts, code,
		tsArg(prev.Finished), tsArg(prev.Expires), p.now(), p.asyncCommit)
}

// Get implements Ledger.
func (p *Ledger) Get(ctx context.Context, key string) (*ledger.Record, error) {
	var r *ledger.Record
	err := p.do(ctx, "read", func() error {
		var err error
		r, err = p.getRecord(ctx, p.pool, key, true)
		return err
	})
	return r, err
}

// History implements Ledger.
func (p *Ledger) History(ctx context.Context, key string) ([]ledger.Attempt, error) {
	var out []ledger.Attempt
	err := p.do(ctx, "read", func() error {
		out = nil
		rows, err := p.pool.Query(ctx, p.q(`SELECT n, token, host, pid, `+epochUS("started")+`, `+epochUS("ended")+`,
			exit_code, class, delay_ms, encode(stderr_tail, 'hex')
			FROM {schema}.attempts WHERE key = $1 ORDER BY id`), key)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				a     ledger.Attempt
				code  pgtype.Int4
				class pgtype.Text
				delay pgtype.Int8
			)
			if err := rows.Scan(&a.N, &a.Token, &a.Host, &a.PID, &usTime{&a.Started}, &usTime{&a.Ended}, &code, &class, &delay,
				&hexBytes{&a.StderrTail}); err != nil {
				return err
			}
			a.ExitCode, a.HasExit = int(code.Int32), code.Valid
			a.Class = class.String
			a.Delay = time.Duration(delay.Int64) * time.Millisecond
			out = append(out, a)
		}
		return rows.Err()
	})
	return out, err
}
