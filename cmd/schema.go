package cmd

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/location"
)

type schemaOptions struct {
	apply  bool
	grants []string
}

func newSchemaCmd(a *app) *cobra.Command {
	o := &schemaOptions{}
	c := &cobra.Command{
		Use:   "schema [--apply] [--grant ROLE]...",
		Short: "Print or apply the SQL of a PostgreSQL ledger, for its owner",
		Long: `Print the SQL that creates a PostgreSQL ledger's schema at this idem's
version (the DDL 'idem run' applies on its first run), with the grants a
runtime role needs for each --grant ROLE. It opens no ledger: review it,
or apply it with psql as the role that is to own the ledger.

With --apply, connect to the ledger (--ledger or IDEM_LEDGER) as its
owner and create the schema, or migrate an older one to this idem's
version, then grant each ROLE what a runtime role needs. Run it again
after upgrading idem, before the runtime roles' hosts use the new version.

A runtime role needs no right to create or change anything: USAGE on the
schema, SELECT on meta, SELECT, INSERT, UPDATE and DELETE on records and
attempts, SELECT, INSERT and UPDATE on totals and last_success, and USAGE
on the sequence tokens. With these it runs every command but
'purge --vacuum', which needs the owner.

The schema is idem, or what IDEM_LEDGER_SCHEMA names (lower-case letters,
digits and _); every host of a fleet must use the same.`,
		Example: `  # review the DDL, then apply it as the owner with psql
  idem schema --grant idem_app > idem-schema.sql
  psql -v ON_ERROR_STOP=1 -f idem-schema.sql postgres://dba@db.internal/ops

  # or let idem create or migrate it, as the owner
  idem schema --apply --grant idem_app --ledger postgres://dba@db.internal/ops`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runSchema(c.Context(), a, o)
		},
	}
	f := c.Flags()
	f.SortFlags = false
	f.BoolVar(&o.apply, "apply", false, "create or migrate the schema in the ledger's database, as the connecting role")
	f.StringArrayVar(&o.grants, "grant", nil, "grant ROLE what a runtime role needs (repeatable)")
	helpSection(a, c, exitSection(
		exitLine{exitcode.OK, "printed the SQL, or the schema is at this idem's version"},
		exitLine{exitcode.Usage, "bad arguments, an empty ROLE, a bad IDEM_LEDGER_SCHEMA, or --apply on a SQLite ledger"},
		exitLine{exitcode.IOErr, "--apply could not connect, create, migrate or grant"},
	))
	return c
}

func runSchema(ctx context.Context, a *app, o *schemaOptions) error {
	for _, r := range o.grants {
		if r == "" {
			return usagef("name the runtime role: --grant ROLE", "--grant is empty")
		}
	}
	sch, err := a.backends.Schemer()
	var elsewhere *location.ElsewhereError
	if errors.As(err, &elsewhere) {
		return a.handOff(elsewhere.Companion)
	}
	if sch == nil {
		return usagef("use an idem built with the PostgreSQL backend", "this idem keeps no PostgreSQL ledger")
	}
	schema, err := sch.SchemaName(a.getenv)
	if err != nil {
		return err
	}
	if !o.apply {
		if _, err := fmt.Fprint(a.stdout, sch.SchemaSQL(schema, o.grants)); err != nil {
			return &exitError{code: exitcode.IOErr, msg: fmt.Sprintf("write the SQL: %v", err)}
		}
		return nil
	}
	loc, err := a.ledger()
	if err != nil {
		return err
	}
	if _, ok := loc.Backend().(location.Schemer); !ok {
		return usagef("point --ledger or IDEM_LEDGER at the PostgreSQL database (postgres://USER@HOST:PORT/DATABASE)",
			"idem schema --apply is for a PostgreSQL ledger; a SQLite ledger makes its own schema")
	}
	res, err := sch.ApplySchema(ctx, loc.Value(), schema, o.grants)
	if err != nil {
		return err
	}
	switch {
	case res.Before == 0:
		a.ui.noticef("created the ledger in schema %q at v%d", res.Schema, res.After)
	case res.Before < res.After:
		a.ui.noticef("migrated the ledger in schema %q from v%d to v%d", res.Schema, res.Before, res.After)
	default:
		a.ui.noticef("the ledger in schema %q is at v%d", res.Schema, res.Before)
	}
	if res.Rehomed {
		a.ui.noticef("the ledger in schema %q was restored from a backup: its fencing tokens now start past any handed out since", res.Schema)
	}
	for _, r := range o.grants {
		a.ui.noticef("granted %s the runtime rights", r)
	}
	return nil
}
