// Command contend starts n `idem run` processes at the same instant, on one
// key or on n distinct keys, and reports the batch's wall time, what each
// process did and how many times the command really ran.
//
//	contend -idem PATH -ledger PATH -n 128 [-same] [-wait] [-batches 5]
//
// The command appends a line to a counter file, so executions are counted
// by their side effect, not by idem's word. Outcomes: ran (exit 0, no
// replay notice), replayed (exit 0, "idem: replayed"), busy (exit 75: the
// key was in progress elsewhere, without --wait) and errors (anything
// else; the first distinct messages are printed).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

type outcome struct {
	code   int
	stderr string
	wall   time.Duration
}

func main() {
	idem := flag.String("idem", "idem", "idem binary")
	ledgerPath := flag.String("ledger", "", "ledger file")
	n := flag.Int("n", 32, "simultaneous processes")
	same := flag.Bool("same", false, "all on one key (else n distinct keys)")
	wait := flag.Bool("wait", false, "pass --wait (a busy key is waited for and replayed)")
	batches := flag.Int("batches", 3, "batches to run; wall times are medians")
	flag.Parse()
	if *ledgerPath == "" {
		fmt.Fprintln(os.Stderr, "contend: -ledger is required")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "idem-contend-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)

	var walls, slowest []time.Duration
	var ran, replayed, busy, errs, execs, bad int
	msgs := map[string]int{}
	nonce := strconv.FormatInt(time.Now().UnixNano(), 36)
	for b := 0; b < *batches; b++ {
		counter := filepath.Join(dir, fmt.Sprintf("count-%d", b))
		outs, wall := batch(*idem, *ledgerPath, *n, *same, *wait, fmt.Sprintf("contend-%s-%d", nonce, b), counter)
		walls = append(walls, wall)
		var slow time.Duration
		for _, o := range outs {
			slow = max(slow, o.wall)
			switch {
			case o.code == 0 && strings.Contains(o.stderr, "idem: replayed"):
				replayed++
			case o.code == 0:
				ran++
			case o.code == 75 && !*wait:
				busy++
			default:
				errs++
				line, _, _ := strings.Cut(o.stderr, "\n")
				msgs[fmt.Sprintf("exit %d: %s", o.code, line)]++
			}
		}
		slowest = append(slowest, slow)
		c := lines(counter)
		execs += c
		want := *n
		if *same {
			want = 1
		}
		if c != want {
			bad++
		}
	}
	mode := "distinct keys"
	if *same {
		mode = "one key"
	}
	if *wait {
		mode += " --wait"
	}
	fmt.Printf("%-20s n=%-4d batch %9s (median of %d)  slowest run %9s  ran %d  replayed %d  busy %d  errors %d  executions %d (batches with a wrong count: %d)\n",
		mode, *n, ms(median(walls)), *batches, ms(median(slowest)), ran, replayed, busy, errs, execs, bad)
	for m, c := range msgs {
		fmt.Printf("    %dx %s\n", c, m)
	}
	// A machine-readable line for bench/cmd/goals.
	fmt.Fprintf(os.Stderr, "contend-%s-%d batch_us=%d slowest_us=%d errors=%d busy=%d executions=%d wrong_batches=%d batches=%d\n",
		strings.ReplaceAll(mode, " ", "-"), *n, median(walls).Microseconds(), median(slowest).Microseconds(),
		errs, busy, execs, bad, *batches)
}

func batch(idem, ledgerPath string, n int, same, wait bool, prefix, counter string) ([]outcome, time.Duration) {
	outs := make([]outcome, n)
	cmds := make([]*exec.Cmd, n)
	errBufs := make([]*bytes.Buffer, n)
	for i := range cmds {
		key := prefix
		if !same {
			key = prefix + "-" + strconv.Itoa(i)
		}
		args := []string{"run", "--key", key}
		if wait {
			args = append(args, "--wait")
		}
		args = append(args, "--", "/bin/sh", "-c", `echo x >> "$0"`, counter)
		c := exec.Command(idem, args...)
		c.Env = append(os.Environ(), "IDEM_LEDGER="+ledgerPath, "NO_COLOR=1")
		errBufs[i] = &bytes.Buffer{}
		c.Stderr = errBufs[i]
		cmds[i] = c
	}
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			start := time.Now()
			err := c.Run()
			outs[i].wall = time.Since(start)
			outs[i].code = c.ProcessState.ExitCode()
			if err != nil && c.ProcessState == nil {
				outs[i].code = -1
			}
			outs[i].stderr = errBufs[i].String()
		}()
	}
	start := time.Now()
	close(release)
	wg.Wait()
	return outs, time.Since(start)
}

func lines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\n"))
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "contend:", err)
	os.Exit(1)
}
