package exitcode

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestTable(t *testing.T) {
	names := map[string]int{
		"OK": OK, "NoRecord": NoRecord, "Usage": Usage, "DataErr": DataErr, "Software": Software, "IOErr": IOErr,
		"TempFail": TempFail, "Timeout": Timeout, "CannotExec": CannotExec, "NotFound": NotFound, "Signal": Signal,
	}
	tab := Table()
	if got, want := len(tab), len(names); got != want {
		t.Fatalf("the table has %d entries, want one per constant (%d)", got, want)
	}
	for i, e := range tab {
		if code, ok := names[e.Name]; !ok || code != e.Code {
			t.Errorf("entry %d: name %q does not name the constant %d", i, e.Name, e.Code)
		}
		if i > 0 && e.Code <= tab[i-1].Code {
			t.Errorf("entry %d: code %d is not above %d", i, e.Code, tab[i-1].Code)
		}
		if e.Meaning == "" || strings.ContainsAny(e.Meaning, "\n|") {
			t.Errorf("entry %d: meaning %q is not one line of a table cell", i, e.Meaning)
		}
		if strings.ContainsAny(e.Run, "\n|") {
			t.Errorf("entry %d: run's meaning %q is not one line of a table cell", i, e.Run)
		}
	}
}

// TestDocTable: docs/guide.md's "Exit codes" table is this package's table,
// code for code and meaning for meaning, and the README's "Exit codes" in
// brief is a part of it: each of its rows is one of the table's.
func TestDocTable(t *testing.T) {
	got := mdTable(t, "../../docs/guide.md", "### Exit codes")
	want := []string{"| code | meaning |", "|---|---|", "| the command's | " + Command + " |"}
	for _, e := range Table() {
		want = append(want, "| "+e.Label()+" | "+e.Meaning+" |")
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("docs/guide.md's exit table differs from internal/exitcode's; it should read:\n%s\n\nit reads:\n%s",
			strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
	brief := mdTable(t, "../../README.md", "## Exit codes")
	if len(brief) < 5 || brief[0] != want[0] || brief[1] != want[1] {
		t.Fatalf("README.md's exit codes in brief are not a table of codes and meanings:\n%s", strings.Join(brief, "\n"))
	}
	for _, row := range brief[2:] {
		if !slices.Contains(want[2:], row) {
			t.Errorf("README.md's exit codes in brief has a row that internal/exitcode's table has not:\n%s", row)
		}
	}
}

// mdTable returns the lines of the first table after heading in the
// Markdown file path.
func mdTable(t *testing.T, path, heading string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		rows  []string
		found bool
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case !found:
			found = l == heading
		case strings.HasPrefix(l, "|"):
			rows = append(rows, l)
		case len(rows) > 0:
			return rows
		case strings.HasPrefix(l, "#"):
			t.Fatalf("%s: no table under %q", path, heading)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !found || len(rows) == 0 {
		t.Fatalf("%s: no table under %q", path, heading)
	}
	return rows
}
