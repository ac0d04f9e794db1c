package postgres

import (
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// statements holds a ledger's SQL with its schema's name in place. The SQL
// in this package names every table, sequence and regclass as
// {schema}.name and never relies on search_path: a pooler in transaction
// mode keeps no session state, and a role's or database's search_path
// must not split a fleet into hosts that see the ledger and hosts that
// see public. Each statement is rewritten once per Ledger, on first use.
type statements struct {
	r    *strings.Replacer
	done sync.Map // template -> statement
}

func newStatements(schema string) *statements {
	return &statements{r: strings.NewReplacer("{schema}", pgx.Identifier{schema}.Sanitize())}
}

// q returns the statement of template sql for this ledger's schema.
func (p *Ledger) q(sql string) string {
	if s, ok := p.sql.done.Load(sql); ok {
		return s.(string)
	}
	s := p.sql.r.Replace(sql)
	p.sql.done.Store(sql, s)
	return s
}
