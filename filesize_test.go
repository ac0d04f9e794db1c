package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFileSize holds every production Go file of cmd and internal to
// maxLines: a file past that holds more than one topic, and is cut by
// topic, the same way in both ledger backends. So is the conformance
// suite (internal/ledger/ledgertest), which both backends' tests read;
// test files and the end-to-end tests' package are exempt.
func TestFileSize(t *testing.T) {
	const maxLines = 600
	exempt := map[string]bool{"internal/e2e": true}
	files := 0
	for _, root := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if exempt[filepath.ToSlash(path)] {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files++
			if n := bytes.Count(b, []byte("\n")); n > maxLines {
				t.Errorf("%s has %d lines, more than %d: cut it by topic", path, n, maxLines)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files == 0 {
		t.Fatal("no Go files under cmd and internal: the test runs at the module's root")
	}
}
