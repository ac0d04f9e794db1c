package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// runtimeRights are the rights RuntimeGrants gives, one a row: kind and
// object (the schema's name is put in its place) and the privilege.
var runtimeRights = []struct{ kind, object, privilege string }{
	{"SCHEMA", "", "USAGE"},
	{"TABLE", "meta", "SELECT"},
	{"TABLE", "records", "SELECT"}, {"TABLE", "records", "INSERT"}, {"TABLE", "records", "UPDATE"}, {"TABLE", "records", "DELETE"},
	{"TABLE", "attempts", "SELECT"}, {"TABLE", "attempts", "INSERT"}, {"TABLE", "attempts", "UPDATE"}, {"TABLE", "attempts", "DELETE"},
	{"TABLE", "totals", "SELECT"}, {"TABLE", "totals", "INSERT"}, {"TABLE", "totals", "UPDATE"},
	{"TABLE", "last_success", "SELECT"}, {"TABLE", "last_success", "INSERT"}, {"TABLE", "last_success", "UPDATE"},
	{"SEQUENCE", "tokens", "USAGE"},
}

// MissingGrants returns the connected role and the rights a run needs
// (RuntimeGrants) that it lacks, each as the GRANT that gives it: a role
// set up by hand can open the ledger and replay, and fail only when a
// purge or an outcome writes where it may not. Its owner has every right.
func (p *Ledger) MissingGrants(ctx context.Context) (role string, missing []string, err error) {
	s := pgx.Identifier{p.schema}.Sanitize()
	// One statement, one round trip: pg_catalog's functions by their full
	// names, whatever the role's search_path holds.
	cols := []string{"pg_catalog.current_user()"}
	args := make([]any, len(runtimeRights))
	dest := make([]any, 1+len(runtimeRights))
	dest[0] = &role
	held := make([]bool, len(runtimeRights))
	for i, g := range runtimeRights {
		args[i] = p.schema // has_schema_privilege takes the name itself
		if g.object != "" {
			args[i] = s + "." + g.object // the others, an identifier to parse
		}
		n := fmt.Sprintf("$%d::text", i+1)
		col := "pg_catalog.has_" + strings.ToLower(g.kind) + "_privilege(" + n + ", '" + g.privilege + "')"
		switch {
		case g.kind == "SEQUENCE":
			// nextval takes either.
			col = "pg_catalog.has_sequence_privilege(" + n + ", 'USAGE, UPDATE')"
		case g.kind == "TABLE" && g.privilege != "DELETE":
			// The right on every column does what the table's does.
			col = "(" + col + " OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid = pg_catalog.to_regclass(" + n + ")" +
				" AND a.attnum > 0 AND NOT a.attisdropped AND NOT pg_catalog.has_column_privilege(" + n + ", a.attnum, '" + g.privilege + "')))"
		}
		cols = append(cols, col)
		dest[1+i] = &held[i]
	}
	if err := p.db.QueryRow(ctx, "SELECT "+strings.Join(cols, ", "), args...).Scan(dest...); err != nil {
		return "", nil, p.wrap("check", err)
	}
	r := pgx.Identifier{role}.Sanitize()
	for i, g := range runtimeRights {
		if held[i] {
			continue
		}
		on := args[i].(string)
		if g.kind == "SCHEMA" {
			on = s
		}
		if g.kind != "TABLE" {
			on = g.kind + " " + on
		}
		missing = append(missing, "GRANT "+g.privilege+" ON "+on+" TO "+r+";")
	}
	return role, missing, nil
}
