package postgres

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every SQL string of the package names the functions idem's clock and
// tokens rest on as pg_catalog.name, and every statement but VACUUM goes
// through the pinned pool: a hostile search_path reaches neither.
func TestSQLQualifiesWhatItReliesOn(t *testing.T) {
	unqualified := regexp.MustCompile(`(^|[^.\w])(now|clock_timestamp|nextval|setval|set_config|pg_advisory_xact_lock)\s*\(`)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if n.Kind == token.STRING && unqualified.MatchString(n.Value) {
					t.Errorf("%s: unqualified function in SQL: %s", fset.Position(n.Pos()), n.Value)
				}
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.SelectorExpr); ok && x.Sel.Name == "pool" && n.Sel.Name != "Close" &&
					n.Sel.Name != "Acquire" && n.Sel.Name != "AcquireAllIdle" && n.Sel.Name != "SendBatch" {
					if !strings.Contains(sliceOf(fset, name, n), "VACUUM") {
						t.Errorf("%s: pool.%s bypasses the pinned search_path: use p.db", fset.Position(n.Pos()), n.Sel.Name)
					}
				}
			}
			return true
		})
	}
}

// sliceOf is the source line of n.
func sliceOf(fset *token.FileSet, name string, n ast.Node) string {
	src, _ := os.ReadFile(name)
	return strings.Split(string(src), "\n")[fset.Position(n.Pos()).Line-1]
}
