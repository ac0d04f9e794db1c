package cmd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/key"
)

// runKey runs `idem key PARTS...` in process and returns its stdout line.
func runKey(t *testing.T, parts ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := Main(context.Background(), append([]string{"key", "--"}, parts...), &out, &errb, linkedAll()); code != 0 {
		t.Fatalf("idem key %q: exit %d, stderr %q", parts, code, errb.String())
	}
	if errb.Len() != 0 {
		t.Errorf("idem key %q: stderr %q", parts, errb.String())
	}
	line, ok := strings.CutSuffix(out.String(), "\n")
	if !ok || strings.Contains(line, "\n") {
		t.Fatalf("idem key %q: stdout %q, want one line", parts, out.String())
	}
	return line
}

// TestKeyCommandHostileParts covers what a script cannot pass: newlines,
// control characters and bytes that are not UTF-8.
func TestKeyCommandHostileParts(t *testing.T) {
	ledgerPath := filepath.Join(t.TempDir(), "state", "ledger.db")
	t.Setenv("IDEM_LEDGER", ledgerPath)
	cases := [][]string{
		{"line one\nline two"},
		{"line one", "line two"},
		{"cr\r\nlf"},
		{"tab\there", "nul-free\x01\x7f"},
		{"\xff\xfe not utf-8"},
		{"\xff"},
		{"emoji 🚀 launch", "ключ"},
		{"a:b", "c"},
		{"a", "b:c"},
		{strings.Repeat("é", 200)},
		{strings.Repeat("x", 127) + "\n"},
		{`"; rm -rf / #`, "$(reboot)", "`id`"},
	}
	seen := map[string][]string{}
	for _, parts := range cases {
		k := runKey(t, parts...)
		if err := key.Validate(k); err != nil {
			t.Errorf("idem key %q = %q: %v", parts, k, err)
		}
		if k != key.Build(parts...) {
			t.Errorf("idem key %q = %q, want key.Build's %q", parts, k, key.Build(parts...))
		}
		if again := runKey(t, parts...); again != k {
			t.Errorf("idem key %q: %q then %q", parts, k, again)
		}
		if prev, ok := seen[k]; ok {
			t.Errorf("idem key %q and %q both give %q", prev, parts, k)
		}
		seen[k] = parts
	}
	if _, err := os.Stat(filepath.Dir(ledgerPath)); !os.IsNotExist(err) {
		t.Errorf("idem key touched the ledger directory: %v", err)
	}
}
