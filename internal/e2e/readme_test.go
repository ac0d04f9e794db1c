package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// testedTag marks a documentation code block whose lines a testscript
// runs: <!-- tested: testscripts/readme_cron.txtar --> right before the fence.
var testedTag = regexp.MustCompile(`^<!-- tested: (testscripts/[A-Za-z0-9_.-]+\.txtar) -->$`)

// TestDocTestedBlocks fails when a code block of the README or docs/ tagged
// as tested says something its script does not run: every non-blank line
// of the block must be a whole line of the named script (the script holds
// the block's files verbatim in its archive, or runs its lines), and every
// named script must exist. Changing a tagged block without its script, or
// removing a script a block names, fails here; so does a page that no
// longer shows, tested, the examples it is there for.
func TestDocTestedBlocks(t *testing.T) {
	root := moduleRoot(t)
	want := map[string][]string{ // the scripts each page's blocks must name
		"README.md":         {"readme_quickstart", "readme_cron", "readme_ci", "readme_webhook", "readme_systemd"},
		"docs/recipes.md":   {"readme_cron", "readme_ci", "readme_webhook", "readme_systemd", "recipes_catchup"},
		"docs/operators.md": {"readme_operators", "metrics_output", "readme_pg_restore", "operators_salvage"},
	}
	total := 0
	for _, file := range docFiles(t, root) {
		blocks, err := testedBlocks(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		total += len(blocks)
		named := map[string]bool{}
		for _, b := range blocks {
			named[strings.TrimSuffix(filepath.Base(b.script), ".txtar")] = true
			script, err := os.ReadFile(filepath.Join(root, b.script))
			if err != nil {
				t.Errorf("%s:%d: the tested block names %s: %v", file, b.line, b.script, err)
				continue
			}
			have := map[string]bool{}
			for _, l := range strings.Split(string(script), "\n") {
				have[strings.TrimRight(l, " \t")] = true
			}
			for i, l := range b.lines {
				if strings.TrimSpace(l) == "" {
					continue
				}
				if !have[strings.TrimRight(l, " \t")] {
					t.Errorf("%s:%d: line of a block tagged as tested is not in %s (change both together):\n\t%s",
						file, b.line+1+i, b.script, l)
				}
			}
		}
		for _, s := range want[file] {
			if !named[s] {
				t.Errorf("%s has no code block tagged as tested by testscripts/%s.txtar", file, s)
			}
		}
	}
	if total < 12 {
		t.Errorf("the README and docs/ have %d code blocks tagged as tested, want at least 12 (the quick start, cron, CI, webhook, systemd and operator examples)", total)
	}
}

type readmeBlock struct {
	script string
	line   int // the fence's line, 1-based
	lines  []string
}

// testedBlocks returns a Markdown file's code blocks that follow a tested tag
// (blank lines between the tag and the fence are allowed).
func testedBlocks(path string) ([]readmeBlock, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out     []readmeBlock
		pending string // a tag waiting for its fence
		cur     *readmeBlock
		n       int
	)
	var indent string // a block's, in a list item: its fence's
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		l := sc.Text()
		t := strings.TrimLeft(l, " ")
		switch {
		case cur != nil && strings.HasPrefix(t, "```"):
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, strings.TrimPrefix(l, indent))
		case testedTag.MatchString(t):
			pending = testedTag.FindStringSubmatch(t)[1]
		case pending != "" && strings.HasPrefix(t, "```"):
			cur = &readmeBlock{script: pending, line: n}
			indent = l[:len(l)-len(t)]
			pending = ""
		case pending != "" && strings.TrimSpace(l) != "":
			return nil, fmt.Errorf("%s:%d: a tested tag must be followed by a code block", path, n)
		}
	}
	if cur != nil || pending != "" {
		return nil, fmt.Errorf("%s: unterminated tested block", path)
	}
	return out, sc.Err()
}

// TestDocReportSchema: docs/operators.md documents exactly the fields an
// `idem run --report` file has, its example has them all, and both name
// the schema version idem writes.
func TestDocReportSchema(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "operators.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "\n## `idem run --report FILE`\n")
	if start < 0 {
		t.Fatal("docs/operators.md has no --report section")
	}
	section := text[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}

	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	run(t, clean([]string{"IDEM_LEDGER=" + filepath.Join(dir, "ledger.db")}, idemBin(t),
		"run", "--key", "readme:report", "--report", report, "--", "/bin/true")).expect(0)
	var got map[string]any
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}

	block := regexp.MustCompile("(?s)```json\n(.*?)```").FindStringSubmatch(section)
	if block == nil {
		t.Fatal("the --report section has no JSON example")
	}
	var example map[string]any
	if err := json.Unmarshal([]byte(block[1]), &example); err != nil {
		t.Fatalf("the --report example is not JSON: %v", err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| ([^|]+) \|`).FindAllStringSubmatch(section, -1) {
		for _, f := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(m[1], -1) {
			documented[f[1]] = true
		}
	}
	for k := range got {
		if !documented[k] {
			t.Errorf("report field %q is not in docs/operators.md's table", k)
		}
		if _, ok := example[k]; !ok {
			t.Errorf("report field %q is not in docs/operators.md's example", k)
		}
	}
	for k := range documented {
		if _, ok := got[k]; !ok {
			t.Errorf("docs/operators.md's table documents %q, which a report does not have", k)
		}
	}
	for k := range example {
		if _, ok := got[k]; !ok {
			t.Errorf("docs/operators.md's example has %q, which a report does not have", k)
		}
	}
	v := fmt.Sprint(got["schema_version"])
	if fmt.Sprint(example["schema_version"]) != v {
		t.Errorf("docs/operators.md's example has schema_version %v, idem writes %s", example["schema_version"], v)
	}
	if !strings.Contains(section, "| `schema_version` | "+v+";") {
		t.Errorf("docs/operators.md's table does not give schema_version %s", v)
	}
}

// TestREADMEFrontPage: the README is a front page, at most 15 KiB, whose
// first screen holds the two set-up commands a newcomer needs: the one
// that runs idem's main job on the default SQLite ledger, which runs here
// verbatim in a fresh clone and home (the repeat replays), and the one
// that runs the whole test suite.
func TestREADMEFrontPage(t *testing.T) {
	root := moduleRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(readme) > 15<<10 {
		t.Errorf("README.md is %d bytes, more than 15 KiB: move reference material to docs/", len(readme))
	}
	lines := strings.Split(string(readme), "\n")
	block := func(lead string) string {
		t.Helper()
		for i, l := range lines {
			if !strings.HasPrefix(l, lead) {
				continue
			}
			for j := i + 1; j < len(lines); j++ {
				if lines[j] == "```sh" {
					for k := j + 1; k < len(lines); k++ {
						if lines[k] == "```" {
							if k >= firstScreen {
								t.Errorf("the %s block ends on line %d, past the first screen (%d lines)", lead, k+1, firstScreen)
							}
							return strings.Join(lines[j+1:k], "\n") + "\n"
						}
					}
				}
			}
		}
		t.Fatalf("README.md has no %s paragraph followed by a sh block", lead)
		return ""
	}
	runIt, testIt := block("**Run it**"), block("**Test it**")
	if !strings.Contains(testIt, "bash .ci/run") {
		t.Errorf("the Test it block does not run the whole suite (bash .ci/run):\n%s", testIt)
	}
	if testing.Short() {
		return
	}
	needGitCheckout(t)
	goTool := needTool(t, "go")
	needTool(t, "git")
	home := t.TempDir()
	env := []string{basePath(t), "HOME=" + home, "GOPATH=" + filepath.Join(home, "go"),
		"GOMODCACHE=" + strings.TrimSpace(output(t, inherit(nil, goTool, "env", "GOMODCACHE"))),
		"GOCACHE=" + strings.TrimSpace(output(t, inherit(nil, goTool, "env", "GOCACHE"))),
		"GOPROXY=off", "GOTOOLCHAIN=local"}
	script := strings.ReplaceAll(runIt, "<this repository>", root)
	last := lines[0]
	for _, l := range strings.Split(strings.TrimSpace(runIt), "\n") {
		last = l
	}
	c := clean(env, "/bin/bash", "-euc", script+last+"\n")
	c.dir, c.timeout = home, 10*time.Minute
	p := run(t, c).expect(0)
	if p.stdout != "hello\nhello\n" || !strings.Contains(p.stderr, "idem: replayed demo:hello") {
		t.Errorf("the Run it block, and its last line again, printed %v; want hello twice, the second replayed", p)
	}
	if _, err := os.Stat(filepath.Join(home, ".local", "state", "idem", "ledger.db")); err != nil {
		t.Errorf("no ledger at the default location the paragraph names: %v", err)
	}
}

// firstScreen is how many lines of the README a newcomer sees first.
const firstScreen = 40
