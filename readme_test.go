package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
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
	blocks, err := testedBlocks("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) < 6 {
		t.Fatalf("README has %d code blocks tagged as tested, want the cron, CI, webhook and operator examples (at least 6)", len(blocks))
	}
	for _, b := range blocks {
		script, err := os.ReadFile(b.script)
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

// httpsink URLFILE LOG [FAILS]: a stand-in for an HTTP API that honours
// Idempotency-Key. It listens on 127.0.0.1, writes its base URL to URLFILE,
// and appends one line per request to LOG: "KEY BODY" (the body's bytes
// with newlines as spaces). The first FAILS requests get 503. A repeated
// key gets 200 and "duplicate" without a new log line. It exits after 60s.
func httpsink() {
	urlFile, logFile := os.Args[1], os.Args[2]
	fails := 0
	if len(os.Args) > 3 {
		fails, _ = strconv.Atoi(os.Args[3])
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		n    int
	)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		k := r.Header.Get("Idempotency-Key")
		mu.Lock()
		defer mu.Unlock()
		n++
		if n <= fails {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		if seen[k] {
			fmt.Fprintln(w, "duplicate")
			return
		}
		seen[k] = true
		f, err := os.OpenFile(logFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintf(f, "%s %s\n", k, strings.ReplaceAll(strings.TrimSpace(string(body)), "\n", " "))
			f.Close()
		}
		fmt.Fprintln(w, "accepted")
	})}
	tmp := urlFile + ".tmp"
	os.WriteFile(tmp, []byte("http://"+ln.Addr().String()), 0o644)
	os.Rename(tmp, urlFile)
	go func() {
		time.Sleep(60 * time.Second)
		os.Exit(0)
	}()
	srv.Serve(ln)
}
