package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestFAQMessages: every idem line that docs/faq.md quotes in a code block
// ("# idem: error: ...") is one that idem prints in the situation the FAQ
// describes, so an answer cannot keep a message idem no longer gives. The
// FAQ's paths are under /srv (here under a temporary directory, cut from
// the output); ages ("0s ago") and a quoted "..." match anything.
func TestFAQMessages(t *testing.T) {
	root := moduleRoot(t)
	faq, err := os.ReadFile(filepath.Join(root, "docs", "faq.md"))
	if err != nil {
		t.Fatal(err)
	}
	var quoted []string
	inBlock := false
	for _, l := range strings.Split(string(faq), "\n") {
		switch {
		case strings.HasPrefix(l, "```"):
			inBlock = !inBlock
		case inBlock && strings.HasPrefix(l, "# idem: "):
			quoted = append(quoted, strings.TrimPrefix(l, "# "))
		}
	}
	if len(quoted) < 8 {
		t.Fatalf("docs/faq.md quotes %d idem lines in its code blocks, want the key, pipeline, fingerprint, replay and ledger errors (at least 8)", len(quoted))
	}

	dir := t.TempDir()
	app := filepath.Join(dir, "srv", "app")
	if err := os.MkdirAll(app, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(app, "x.sh"), []byte("#!/bin/sh\necho x\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"IDEM_LEDGER=" + filepath.Join(dir, "ledger.db")}
	idem := idemBin(t)
	var stderr strings.Builder
	for _, c := range []struct {
		code int
		args []string
	}{
		{64, []string{"run", "--key", "backup:", "--", "true"}},      // "backup:$DAY", DAY unset
		{64, []string{"run", "--key", "deploy:prod:", "--", "true"}}, // "deploy:prod:$SHA", SHA unset
		{64, []string{"key", "deploy", "prod", ""}},
		{127, []string{"run", "--key", "demo:pipe", "--", "echo hi | tr a-z A-Z"}},
		{1, []string{"inspect", "demo:pipe"}},
		{0, []string{"run", "--key", "demo:script", "--", "./x.sh"}},
		{65, []string{"run", "--key", "demo:script", "--", filepath.Join(app, "x.sh")}},
		{3, []string{"run", "--key", "demo:fail", "--", "sh", "-c", "exit 3"}},
		{3, []string{"run", "--key", "demo:fail", "--", "sh", "-c", "exit 3"}},
		{74, []string{"--ledger", filepath.Join(dir, "srv", "idem", "ledger.db"), "run", "--key", "demo:nodir", "--", "true"}},
	} {
		cmd := clean(env, idem, c.args...)
		cmd.dir = app
		p := run(t, cmd).expect(c.code)
		stderr.WriteString(p.stderr)
	}
	age := regexp.MustCompile(`\b\d+[smhd] ago\b`)
	printed := map[string]bool{}
	var lines []string
	for _, l := range strings.Split(strings.ReplaceAll(stderr.String(), dir, ""), "\n") {
		l = age.ReplaceAllString(l, "AGE ago")
		printed[l] = true
		lines = append(lines, l)
	}
	for _, q := range quoted {
		q = age.ReplaceAllString(q, "AGE ago")
		if printed[q] {
			continue
		}
		parts := strings.Split(q, "...")
		for i, s := range parts {
			parts[i] = regexp.QuoteMeta(s)
		}
		re := regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
		if !slices.ContainsFunc(lines, re.MatchString) {
			t.Errorf("docs/faq.md quotes a line idem does not print:\n\t%s\nidem printed:\n%s", q, strings.Join(lines, "\n"))
		}
	}
}
