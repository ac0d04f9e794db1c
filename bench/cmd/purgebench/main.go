// Command purgebench times `idem purge` on a big ledger while `idem run`s of
// new keys go on one after another, and reports the purge's total time and
// the longest any of those runs took (against their median before the
// purge started).
//
//	purgebench -idem PATH -ledger PATH [-purge "purge --expired"]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	idem := flag.String("idem", "idem", "idem binary")
	ledgerPath := flag.String("ledger", "", "a filled ledger")
	purgeArgs := flag.String("purge", "purge --expired", "the purge command's arguments")
	baseline := flag.Int("baseline", 30, "runs timed before the purge")
	flag.Parse()
	if *ledgerPath == "" {
		fmt.Fprintln(os.Stderr, "purgebench: -ledger is required")
		os.Exit(2)
	}
	nonce := strconv.FormatInt(time.Now().UnixNano(), 36)
	seq := 0
	run := func() (time.Duration, int, string) {
		seq++
		c := exec.Command(*idem, "--ledger", *ledgerPath, "run", "--key", "purgebench-"+nonce+"-"+strconv.Itoa(seq), "--", "/bin/true")
		var stderr bytes.Buffer
		c.Stderr = &stderr
		start := time.Now()
		c.Run()
		return time.Since(start), c.ProcessState.ExitCode(), stderr.String()
	}

	var before []time.Duration
	for range *baseline {
		d, code, msg := run()
		if code != 0 {
			fmt.Fprintf(os.Stderr, "purgebench: a run before the purge failed: exit %d: %s", code, msg)
			os.Exit(1)
		}
		before = append(before, d)
	}

	p := exec.Command(*idem, append([]string{"--ledger", *ledgerPath}, strings.Fields(*purgeArgs)...)...)
	var pout bytes.Buffer
	p.Stdout, p.Stderr = &pout, &pout
	start := time.Now()
	if err := p.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "purgebench:", err)
		os.Exit(1)
	}
	done := make(chan struct{})
	var total time.Duration
	go func() {
		p.Wait()
		total = time.Since(start)
		close(done)
	}()
	var during []time.Duration
	errs := 0
	var firstErr string
loop:
	for {
		select {
		case <-done:
			break loop
		default:
		}
		d, code, msg := run()
		during = append(during, d)
		if code != 0 {
			errs++
			if firstErr == "" {
				firstErr = fmt.Sprintf("exit %d: %s", code, strings.TrimSpace(msg))
			}
		}
	}
	<-done
	base := median(before)
	longest := slices.Max(append([]time.Duration{0}, during...))
	fmt.Printf("idem %s: exit %d in %.2fs; %s\n", *purgeArgs, p.ProcessState.ExitCode(), total.Seconds(), strings.TrimSpace(pout.String()))
	fmt.Printf("runs during the purge: %d (errors %d), median %s, longest %s; median before the purge %s; longest wait %s\n",
		len(during), errs, ms(median(during)), ms(longest), ms(base), ms(max(longest-base, 0)))
	if firstErr != "" {
		fmt.Printf("    first error: %s\n", firstErr)
	}
	// A machine-readable line for bench/cmd/goals.
	fmt.Fprintf(os.Stderr, "purge total_us=%d exit=%d runs=%d errors=%d longest_us=%d base_us=%d wait_us=%d\n",
		total.Microseconds(), p.ProcessState.ExitCode(), len(during), errs, longest.Microseconds(), base.Microseconds(),
		max(longest-base, 0).Microseconds())
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000)
}
