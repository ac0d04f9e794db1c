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
)

// testedTag marks a README code block whose lines a testscript runs:
// <!-- tested: testscripts/readme_cron.txtar --> right before the fence.
var testedTag = regexp.MustCompile(`^<!-- tested: (testscripts/[A-Za-z0-9_.-]+\.txtar) -->$`)

// TestREADMETestedBlocks fails when a README code block tagged as tested
// says something its script does not run: every non-blank line of the
// block must be a whole line of the named script (the script holds the
// block's files verbatim in its archive, or runs its lines), and every
// named script must exist. Changing a tagged block without its script, or
// removing a script a block names, fails here.
func TestREADMETestedBlocks(t *testing.T) {
	root := moduleRoot(t)
	blocks, err := testedBlocks(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) < 6 {
		t.Fatalf("README has %d code blocks tagged as tested, want the cron, CI, webhook and operator examples (at least 6)", len(blocks))
	}
	for _, b := range blocks {
		script, err := os.ReadFile(filepath.Join(root, b.script))
		if err != nil {
			t.Errorf("README.md:%d: the tested block names %s: %v", b.line, b.script, err)
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
				t.Errorf("README.md:%d: line of a block tagged as tested is not in %s (change both together):\n\t%s",
					b.line+1+i, b.script, l)
			}
		}
	}
}

type readmeBlock struct {
	script string
	line   int // the fence's line, 1-based
	lines  []string
}

// testedBlocks returns the README's code blocks that follow a tested tag
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
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		l := sc.Text()
		switch {
		case cur != nil && strings.HasPrefix(l, "```"):
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
		case testedTag.MatchString(l):
			pending = testedTag.FindStringSubmatch(l)[1]
		case pending != "" && strings.HasPrefix(l, "```"):
			cur = &readmeBlock{script: pending, line: n}
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

// TestREADMEReportSchema: the README documents exactly the fields an
// `idem run --report` file has, its example has them all, and both name
// the schema version idem writes.
func TestREADMEReportSchema(t *testing.T) {
	root := moduleRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "### `idem run --report FILE`")
	if start < 0 {
		t.Fatal("README has no --report section")
	}
	section := text[start+1:]
	section = section[:strings.Index(section, "\n### ")]

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
			t.Errorf("report field %q is not in the README's table", k)
		}
		if _, ok := example[k]; !ok {
			t.Errorf("report field %q is not in the README's example", k)
		}
	}
	for k := range documented {
		if _, ok := got[k]; !ok {
			t.Errorf("the README's table documents %q, which a report does not have", k)
		}
	}
	for k := range example {
		if _, ok := got[k]; !ok {
			t.Errorf("the README's example has %q, which a report does not have", k)
		}
	}
	v := fmt.Sprint(got["schema_version"])
	if fmt.Sprint(example["schema_version"]) != v {
		t.Errorf("the README's example has schema_version %v, idem writes %s", example["schema_version"], v)
	}
	if !strings.Contains(section, "| `schema_version` | "+v+";") {
		t.Errorf("the README's table does not give schema_version %s", v)
	}
}
