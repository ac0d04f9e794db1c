package e2e

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// docFiles returns the module's documentation, the files whose links and
// tested blocks the tests check: README.md, CONTRIBUTING.md and every
// docs/*.md, as slash-separated paths relative to the module root.
func docFiles(t testing.TB, root string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md", "CONTRIBUTING.md"}
	for _, d := range docs {
		files = append(files, "docs/"+filepath.Base(d))
	}
	return files
}

var (
	// mdLink is an inline link or image, [text](target) or
	// [text](target "title"), whose target has no spaces.
	mdLink = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	// mdRefLink is a reference definition: [label]: target.
	mdRefLink = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+(\S+)`)
	// codeSpan is inline code, where brackets and parentheses are text.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// urlScheme marks a link that leaves the repository (https:, mailto:).
	urlScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// mdLine is one line of a Markdown file outside its fenced code blocks.
type mdLine struct {
	n    int // 1-based
	text string
}

// proseLines returns the lines of a Markdown text that are not inside a
// fenced code block (nor a fence themselves).
func proseLines(text string) []mdLine {
	var (
		out   []mdLine
		fence string // the open fence's marker, "" outside a block
	)
	for i, l := range strings.Split(text, "\n") {
		t := strings.TrimLeft(l, " ")
		switch {
		case fence != "":
			if strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
				fence = ""
			}
		case strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~"):
			fence = t[:3]
			for len(fence) < len(t) && t[len(fence)] == t[0] {
				fence += t[:1]
			}
		default:
			out = append(out, mdLine{i + 1, l})
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown text: the heading's text without its markup, lower-cased, with
// every character but letters, digits, '_', '-' and spaces dropped and
// spaces made '-'; a repeated anchor gets "-1", "-2", ...
func headingAnchors(text string) map[string]bool {
	heading := regexp.MustCompile(`^#{1,6}\s+(.*?)(?:\s+#+)?\s*$`)
	inlineLink := regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	seen := map[string]int{}
	anchors := map[string]bool{}
	for _, l := range proseLines(text) {
		m := heading.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		h := inlineLink.ReplaceAllString(m[1], "$1")
		h = strings.NewReplacer("`", "", "*", "").Replace(h)
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// docLinks returns the relative links of a Markdown text (targets without
// a URL scheme), outside code blocks and code spans, with their lines.
func docLinks(text string) []mdLine {
	var out []mdLine
	for _, l := range proseLines(text) {
		prose := codeSpan.ReplaceAllString(l.text, "")
		var targets []string
		for _, m := range mdLink.FindAllStringSubmatch(prose, -1) {
			targets = append(targets, m[1])
		}
		if m := mdRefLink.FindStringSubmatch(prose); m != nil {
			targets = append(targets, m[1])
		}
		for _, t := range targets {
			if !urlScheme.MatchString(t) {
				out = append(out, mdLine{l.n, t})
			}
		}
	}
	return out
}

// brokenLinks checks every relative link of the documentation files
// (slash-separated, relative to root): the file or directory it names
// exists inside the module, and an #anchor matches a heading of the
// Markdown file it points into. It returns one message per broken link.
func brokenLinks(root string, files []string) ([]string, error) {
	anchors := map[string]map[string]bool{} // by file, read once
	anchorsOf := func(file string) (map[string]bool, error) {
		if a, ok := anchors[file]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			return nil, err
		}
		anchors[file] = headingAnchors(string(b))
		return anchors[file], nil
	}
	var broken []string
	for _, file := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			return nil, err
		}
		for _, l := range docLinks(string(b)) {
			target, anchor, _ := strings.Cut(l.text, "#")
			dest := file
			if target != "" {
				dest = path.Join(path.Dir(file), target)
				if dest == ".." || strings.HasPrefix(dest, "../") || path.IsAbs(target) {
					broken = append(broken, fmt.Sprintf("%s:%d: %s leaves the repository", file, l.n, l.text))
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest))); err != nil {
					broken = append(broken, fmt.Sprintf("%s:%d: %s: no such file %s", file, l.n, l.text, dest))
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				broken = append(broken, fmt.Sprintf("%s:%d: %s: an anchor into %s, which is not Markdown", file, l.n, l.text, dest))
				continue
			}
			a, err := anchorsOf(dest)
			if err != nil {
				return nil, err
			}
			if !a[anchor] {
				broken = append(broken, fmt.Sprintf("%s:%d: %s: %s has no heading whose anchor is #%s", file, l.n, l.text, dest, anchor))
			}
		}
	}
	return broken, nil
}

// TestDocLinks: every relative link and #anchor in the README,
// CONTRIBUTING.md and docs/ resolves (the file exists, the anchor is a
// heading's), and every page of docs/ is linked from the README.
func TestDocLinks(t *testing.T) {
	root := moduleRoot(t)
	files := docFiles(t, root)
	broken, err := brokenLinks(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range broken {
		t.Error(b)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var linked []string
	for _, l := range docLinks(string(readme)) {
		target, _, _ := strings.Cut(l.text, "#")
		linked = append(linked, path.Clean(target))
	}
	for _, f := range files {
		if strings.HasPrefix(f, "docs/") && !slices.Contains(linked, f) {
			t.Errorf("README.md does not link to %s", f)
		}
	}
}

// TestDocLinksCatchBreakage: the checker fails on a missing file, a missing
// anchor in another file and in the same file, and a link out of the
// module; it accepts GitHub's anchors for headings with code, punctuation
// and repeats, and ignores links in code.
func TestDocLinksCatchBreakage(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(name)), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", strings.Join([]string{
		"# Title",
		"## Flags of `idem run`",
		"## What idem is, and what it is not",
		"## Notes",
		"## Notes",
		"[ok](docs/a.md) [ok](docs/a.md#idem-run---report-file) [ok](#flags-of-idem-run)",
		"[ok](#what-idem-is-and-what-it-is-not) [ok](#notes-1) [ok](https://example.com/x#y)",
		"`[not a link](nowhere.md)`",
		"```",
		"[not a link](nowhere.md)",
		"```",
		"[gone](docs/gone.md) [no anchor](docs/a.md#nope) [no anchor here](#notes-2)",
		"[out](../outside.md)",
	}, "\n"))
	write("docs/a.md", "# A\n## `idem run --report FILE`\n[back](../README.md#title)\n")
	broken, err := brokenLinks(root, []string{"README.md", "docs/a.md"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"README.md:12: docs/gone.md: no such file docs/gone.md",
		"README.md:12: docs/a.md#nope: docs/a.md has no heading whose anchor is #nope",
		"README.md:12: #notes-2: README.md has no heading whose anchor is #notes-2",
		"README.md:13: ../outside.md leaves the repository",
	}
	if strings.Join(broken, "\n") != strings.Join(want, "\n") {
		t.Errorf("broken links:\n%s\nwant:\n%s", strings.Join(broken, "\n"), strings.Join(want, "\n"))
	}
}
