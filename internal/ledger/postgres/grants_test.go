package postgres

import (
	"slices"
	"strings"
	"testing"
)

// TestRuntimeRightsAreTheGrants: the rights MissingGrants checks are the
// ones RuntimeGrants gives, each privilege on each object, no more and no
// fewer: a grant added to one and not the other would let idem check pass
// a role that then fails.
func TestRuntimeRightsAreTheGrants(t *testing.T) {
	var given []string
	for _, g := range RuntimeGrants("s", "r") {
		g = strings.TrimSuffix(strings.TrimPrefix(g, "GRANT "), ` TO "r"`)
		privs, on, ok := strings.Cut(g, " ON ")
		if !ok {
			t.Fatalf("cannot read %q", g)
		}
		kind := "TABLE"
		for _, k := range []string{"SCHEMA", "SEQUENCE"} {
			if rest, ok := strings.CutPrefix(on, k+" "); ok {
				kind, on = k, rest
			}
		}
		for _, object := range strings.Split(on, ", ") {
			object = strings.TrimPrefix(strings.TrimPrefix(object, `"s"`), ".")
			for _, p := range strings.Split(privs, ", ") {
				given = append(given, kind+" "+object+" "+p)
			}
		}
	}
	var checked []string
	for _, g := range runtimeRights {
		checked = append(checked, g.kind+" "+g.object+" "+g.privilege)
	}
	slices.Sort(given)
	slices.Sort(checked)
	if !slices.Equal(given, checked) {
		t.Errorf("RuntimeGrants gives\n%s\nMissingGrants checks\n%s", strings.Join(given, "\n"), strings.Join(checked, "\n"))
	}
}
