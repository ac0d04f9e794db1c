package ledger

import (
	"errors"
	"fmt"
)

// Migration is one numbered change to a backend's schema (see the package
// doc): Version is its number, 1 for the schema's creation; Compat is the
// ledger's compatibility version once it is applied: that of the migration
// before it for an additive change, its own Version for any other.
type Migration struct {
	Version int
	Compat  int
	SQL     string
}

// SchemaVersions is what a ledger stores about its schema. Write 0: the
// ledger has no schema yet. A Compat of 0 means Compat equals Write (a
// ledger from before the two were kept apart stores one number).
type SchemaVersions struct {
	Write, Compat int
}

// compat is v.Compat, or v.Write where it is not stored.
func (v SchemaVersions) compat() int {
	if v.Compat == 0 {
		return v.Write
	}
	return v.Compat
}

// NewerSchemaError says a ledger needs a newer idem: its compatibility
// version is past the migrations this idem knows. Backends wrap it in a
// *StoreError with their own hint.
type NewerSchemaError struct {
	Stored SchemaVersions
	Known  int
}

func (e *NewerSchemaError) Error() string {
	if c := e.Stored.compat(); c != e.Stored.Write {
		return fmt.Sprintf("written by a newer idem (schema v%d, compatible from v%d; this idem knows v%d)", e.Stored.Write, c, e.Known)
	}
	return fmt.Sprintf("written by a newer idem (schema v%d; this idem knows v%d)", e.Stored.Write, e.Known)
}

// OlderSchemaError says a read-only open found a ledger older than this
// idem's schema: it needs migrations, which only an open to write applies.
type OlderSchemaError struct {
	Stored SchemaVersions
	Known  int
}

func (e *OlderSchemaError) Error() string {
	return fmt.Sprintf("written by an older idem (schema v%d; this idem knows v%d), and a read-only open does not upgrade it",
		e.Stored.Write, e.Known)
}

// PlanSchema applies the rules of the package doc: given the versions a
// ledger stores and the backend's migrations (numbered 1, 2, ... in
// order), it returns the migrations to apply, in order (none: use the
// ledger as it is). Errors: *NewerSchemaError when the ledger's
// compatibility version is past the last migration; for a read-only open,
// ErrNoLedger when the ledger has no schema and *OlderSchemaError when it
// needs migrations.
func PlanSchema(stored SchemaVersions, migrations []Migration, readOnly bool) ([]Migration, error) {
	known := len(migrations)
	switch {
	case stored.compat() > known:
		return nil, &NewerSchemaError{Stored: stored, Known: known}
	case stored.Write >= known:
		return nil, nil
	case readOnly && stored.Write == 0:
		return nil, ErrNoLedger
	case readOnly:
		return nil, &OlderSchemaError{Stored: stored, Known: known}
	}
	return migrations[stored.Write:], nil
}

// After returns the versions a ledger stores once pending, from PlanSchema,
// is applied on top of stored.
func (v SchemaVersions) After(pending []Migration) SchemaVersions {
	if len(pending) == 0 {
		return v
	}
	last := pending[len(pending)-1]
	return SchemaVersions{Write: last.Version, Compat: last.Compat}
}

// PlanError puts an error of PlanSchema in a *StoreError (Op "open") for
// the ledger at path, with a hint: noLedgerHint for ErrNoLedger and
// newerHint for a *NewerSchemaError, which differ by backend.
func PlanError(err error, path, noLedgerHint, newerHint string) *StoreError {
	se := &StoreError{Op: "open", Path: path, Err: err}
	var older *OlderSchemaError
	switch {
	case errors.Is(err, ErrNoLedger):
		se.Hint = noLedgerHint
	case errors.As(err, &older):
		se.Hint = "run idem once to upgrade the ledger, then look again"
	default:
		se.Hint = newerHint
	}
	return se
}
