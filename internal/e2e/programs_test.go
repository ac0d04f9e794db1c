package e2e

// The helper programs the scripts and the Go-level tests run as separate
// processes. testscript.Main (main_test.go) registers each under its name:
// this test binary, re-executed, runs the function.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/idemhq/idem/cmd"
	"github.com/idemhq/idem/internal/fingerprint"
	"github.com/idemhq/idem/internal/flagval"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/sqlite"
	"github.com/idemhq/idem/internal/location"
	"github.com/idemhq/idem/internal/location/filebackend"
	"github.com/idemhq/idem/internal/location/pgbackend"
	"github.com/idemhq/idem/internal/ping"
)

// idemProgram is idem as the scripts and tests run it: this test binary's
// own idem, or, with IDEM_TEST_BINARY set, the executable it names (an
// earlier commit's build), so that the tests show what that build did: a
// test added for a fix must fail there.
func idemProgram() {
	if bin := os.Getenv("IDEM_TEST_BINARY"); bin != "" {
		err := syscall.Exec(bin, append([]string{"idem"}, os.Args[1:]...), os.Environ())
		fmt.Fprintln(os.Stderr, "IDEM_TEST_BINARY:", err)
		os.Exit(2)
	}
	os.Exit(cmd.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr, fullIdem()))
}

// fullIdem is what idem-net links: the scripts' in-process idem keeps
// both kinds of ledger, and pings. (The built executables, idem and idem-net, and
// the hand-off between them are tested in handoff_test.go.)
func fullIdem() cmd.Linked {
	return cmd.Linked{Backends: location.NewRegistry(pgbackend.Backend{}, filebackend.Backend{}), Ping: ping.New}
}

// programs is every helper program, by the name scripts and tests run it as.
func programs() map[string]func() {
	return map[string]func(){
		"idem": idemProgram,

		// simple commands for scripts
		"echoargs": echoargs,
		"exitwith": exitwith,
		"flaky":    flaky,
		"sleeper":  sleeper,
		"printenv": printenv,
		"catstdin": catstdin,
		"writebin": writebin,
		"appendto": appendto,
		"listfds":  listfds,

		// children for the crash-safety and lease tests
		"crashjob":   crashjob,
		"bgholder":   bgholder,
		"retryafter": retryafter,
		"slowflaky":  slowflaky,
		"trapexit":   trapexit,
		"slowappend": slowappend,
		"gate":       gate,
		"fgcheck":    fgcheck,
		"overlapjob": overlapjob,
		"ledgerhog":  ledgerhog,

		// records with a past clock, for the operators' scripts
		"seedrecord": seedrecord,

		// an HTTP API stand-in for the README's webhook example
		"httpsink": httpsink,
		"httppost": httppost,
		"freeport": freeport,

		// healthchecks.io's ping API on loopback, for the monitoring recipes
		"hcping": hcping,

		// the bad-network tests (pgnet_test.go)
		"tcpproxy":  tcpproxy,
		"heartbeat": heartbeat,
		"nsinit":    nsinit,
	}
}

// echoargs prints its arguments, one line, space separated.
func echoargs() {
	fmt.Println(strings.Join(os.Args[1:], " "))
}

// exitwith N [STDOUT [STDERR]] prints the texts and exits N.
func exitwith() {
	if len(os.Args) > 2 {
		fmt.Println(os.Args[2])
	}
	if len(os.Args) > 3 {
		fmt.Fprintln(os.Stderr, os.Args[3])
	}
	code, _ := strconv.Atoi(os.Args[1])
	os.Exit(code)
}

// flaky COUNTER FAILS CODE: exits CODE for the first FAILS calls that share
// COUNTER (a file), then 0. It prints the call number on stdout.
func flaky() {
	path, fails, code := os.Args[1], atoi(os.Args[2]), atoi(os.Args[3])
	b, _ := os.ReadFile(path)
	n := atoi(strings.TrimSpace(string(b))) + 1
	if err := os.WriteFile(path, []byte(strconv.Itoa(n)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Printf("call %d\n", n)
	if n <= fails {
		fmt.Fprintf(os.Stderr, "call %d failing with %d\n", n, code)
		os.Exit(code)
	}
}

// sleeper DURATION [READYFILE]: writes READYFILE (with its pid), then sleeps.
func sleeper() {
	d, err := time.ParseDuration(os.Args[1])
	if err != nil {
		os.Exit(2)
	}
	if len(os.Args) > 2 {
		os.WriteFile(os.Args[2], []byte(strconv.Itoa(os.Getpid())), 0o644)
	}
	time.Sleep(d)
	fmt.Println("slept", d)
}

// printenv NAME... prints NAME=value for each (or NAME unset).
func printenv() {
	for _, name := range os.Args[1:] {
		if v, ok := os.LookupEnv(name); ok {
			fmt.Printf("%s=%s\n", name, v)
		} else {
			fmt.Printf("%s unset\n", name)
		}
	}
}

// catstdin copies stdin to stdout, prefixed with the attempt number.
func catstdin() {
	fmt.Printf("attempt %s: ", os.Getenv("IDEM_ATTEMPT"))
	io.Copy(os.Stdout, bufio.NewReader(os.Stdin))
}

// writebin N: writes N bytes 0..255 repeating to stdout and, reversed, to stderr.
func writebin() {
	n := atoi(os.Args[1])
	out, errb := make([]byte, n), make([]byte, n)
	for i := range n {
		out[i] = byte(i)
		errb[i] = byte(255 - i%256)
	}
	os.Stdout.Write(out)
	os.Stderr.Write(errb)
}

// appendto FILE LINE: appends LINE to FILE (one execution, one line).
func appendto() {
	f, err := os.OpenFile(os.Args[1], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		os.Exit(2)
	}
	fmt.Fprintln(f, os.Args[2])
	f.Close()
	fmt.Println(os.Args[2])
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// listfds prints the process's open file descriptors, one "FD TARGET" a
// line (the descriptor it reads /proc/self/fd with left out).
func listfds() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || strings.HasPrefix(target, "/proc/") && strings.HasSuffix(target, "/fd") {
			continue
		}
		fmt.Println(e.Name(), target)
	}
}

// procMark is a process crashjob recorded: its pid and start time.
type procMark struct {
	pid   int
	start uint64
}

func readMarks(path string) []procMark {
	b, _ := os.ReadFile(path)
	var out []procMark
	for _, line := range strings.Split(string(b), "\n") {
		var m procMark
		if _, err := fmt.Sscanf(line, "run %d %d", &m.pid, &m.start); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// running reports whether the marked process still runs: it exists, is
// not a zombie (PID 1 here does not reap orphans), and is the same process.
func (m procMark) running() bool {
	start, state, err := statOf(m.pid)
	return err == nil && state != 'Z' && state != 'X' && start == m.start
}

// statOf reads the state (field 3) and start time (field 22) of pid.
func statOf(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 20 {
		return 0, 0, fmt.Errorf("malformed stat of %d", pid)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return start, f[0][0], err
}

func markSelf(path string) {
	start, _, err := statOf(os.Getpid())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Fprintf(f, "run %d %d\n", os.Getpid(), start)
	f.Close()
}

// crashjob MARKS: the first call (MARKS empty) records itself in MARKS,
// starts a grandchild in its process group that ignores SIGTERM and records
// itself too, prints "hanging PID" and hangs. A later call first checks that
// no process recorded in MARKS still runs (else it prints "overlap PID" and
// exits 3: two executions overlapped), then records itself and prints
// "done PID".
func crashjob() {
	if len(os.Args) == 3 && os.Args[1] == "-grandchild" {
		signal.Ignore(syscall.SIGTERM)
		markSelf(os.Args[2])
		time.Sleep(time.Minute)
		return
	}
	marks := os.Args[1]
	prev := readMarks(marks)
	if len(prev) == 0 {
		markSelf(marks)
		g := exec.Command("crashjob", "-grandchild", marks)
		g.Stdout, g.Stderr = os.Stdout, os.Stderr
		if err := g.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		for i := 0; i < 1000 && len(readMarks(marks)) < 2; i++ {
			time.Sleep(5 * time.Millisecond)
		}
		fmt.Println("hanging", os.Getpid())
		time.Sleep(time.Minute)
		return
	}
	for _, m := range prev {
		if m.running() {
			fmt.Println("overlap", m.pid)
			os.Exit(3)
		}
	}
	markSelf(marks)
	fmt.Println("done", os.Getpid())
}

// bgholder PIDFILE starts a grandchild that keeps stdout open for 30s and
// writes its pid to PIDFILE, then prints "parent done" and exits 0.
func bgholder() {
	if len(os.Args) == 3 && os.Args[1] == "-grandchild" {
		tmp := os.Args[2] + ".tmp"
		os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())), 0o644)
		os.Rename(tmp, os.Args[2])
		time.Sleep(30 * time.Second)
		return
	}
	g := exec.Command("bgholder", "-grandchild", os.Args[1])
	g.Stdout = os.Stdout
	if err := g.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for i := 0; i < 1000; i++ {
		if _, err := os.Stat(os.Args[1]); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Println("parent done")
}

// bump increments the counter in path and returns the new value.
func bump(path string) int {
	b, _ := os.ReadFile(path)
	n := atoi(strings.TrimSpace(string(b))) + 1
	if err := os.WriteFile(path, []byte(strconv.Itoa(n)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return n
}

// retryafter COUNTER CONTENT: the first call writes CONTENT to the file
// named by IDEM_RETRY_AFTER and exits 75; later calls succeed. Each prints
// "call N".
func retryafter() {
	n := bump(os.Args[1])
	fmt.Println("call", n)
	if n == 1 {
		if err := os.WriteFile(os.Getenv("IDEM_RETRY_AFTER"), []byte(os.Args[2]), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(75)
	}
}

// slowflaky COUNTER FAILS CODE DUR [READY]: like flaky, but writes READY
// (if given) and sleeps DUR first.
func slowflaky() {
	n := bump(os.Args[1])
	if len(os.Args) > 5 {
		os.WriteFile(os.Args[5], []byte(strconv.Itoa(os.Getpid())), 0o644)
	}
	d, _ := time.ParseDuration(os.Args[4])
	time.Sleep(d)
	fmt.Printf("call %d\n", n)
	if n <= atoi(os.Args[2]) {
		os.Exit(atoi(os.Args[3]))
	}
}

// trapexit CODE READY: catches SIGTERM and SIGINT, writes READY, and on the
// first signal prints "caught SIGNAL" and exits CODE.
func trapexit() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	os.WriteFile(os.Args[2], []byte(strconv.Itoa(os.Getpid())), 0o644)
	select {
	case s := <-sigs:
		fmt.Println("caught", s)
		os.Exit(atoi(os.Args[1]))
	case <-time.After(time.Minute):
		os.Exit(2)
	}
}

// slowappend FILE LINE DUR: sleeps DUR, then appends LINE to FILE and
// prints it.
func slowappend() {
	d, _ := time.ParseDuration(os.Args[3])
	time.Sleep(d)
	appendto()
}

// gate FIFO PROG ARG...: blocks until the FIFO is opened for writing, then
// execs PROG. A test starts many gated processes and opens the FIFO once,
// so that they all go in the same instant.
func gate() {
	f, err := os.OpenFile(os.Args[1], os.O_RDONLY, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	f.Close()
	prog, err := exec.LookPath(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	err = syscall.Exec(prog, os.Args[2:], os.Environ())
	fmt.Fprintln(os.Stderr, err)
	os.Exit(2)
}

// fgcheck COUNTER: prints "call N foreground" when its process group holds
// the terminal on stdin ("background" otherwise); the first call exits 75.
func fgcheck() {
	n := bump(os.Args[1])
	where := "background"
	if pgrp, err := unix.IoctlGetInt(0, unix.TIOCGPGRP); err == nil && pgrp == syscall.Getpgrp() {
		where = "foreground"
	}
	fmt.Printf("call %d %s\n", n, where)
	if n == 1 {
		os.Exit(75)
	}
}

// seedrecord KEY STATUS AGE [TTL] [-- ARGV...] writes KEY into $IDEM_LEDGER
// as if a run had reached STATUS AGE ago (STATUS in_progress: reserved AGE
// ago with a 1h lease, held by pid 4242 on host seedhost, which no local
// check finds dead). With ARGV the record has the fingerprint `idem run --key
// KEY -- ARGV` computes; without, a fingerprint no run has. The record
// stores "seeded KEY" as stdout. Exit 0, or 2 on error.
func seedrecord() {
	if err := seed(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "seedrecord:", err)
		os.Exit(2)
	}
}

func seed(args []string) error {
	fp, argv := "seeded", []string{"seeded"}
	if i := slices.Index(args, "--"); i >= 0 {
		argv = args[i+1:]
		args = args[:i]
		sum, err := fingerprint.Sum(fingerprint.Input{Argv: argv})
		if err != nil {
			return err
		}
		fp = sum
	}
	if len(args) < 3 || len(args) > 4 {
		return fmt.Errorf("usage: seedrecord KEY STATUS AGE [TTL] [-- ARGV...]")
	}
	k, status := args[0], ledger.Status(args[1])
	ago, err := flagval.ParseDuration(args[2])
	if err != nil {
		return err
	}
	var ttl time.Duration
	if len(args) == 4 {
		if ttl, err = flagval.ParseDuration(args[3]); err != nil {
			return err
		}
	}
	ctx := context.Background()
	l, err := sqlite.Open(ctx, os.Getenv("IDEM_LEDGER"))
	if err != nil {
		return err
	}
	defer l.Close()
	at := time.Now().Add(-ago)
	l.Now = func() time.Time { return at }
	res, err := l.Reserve(ctx, ledger.ReserveRequest{Key: k, Fingerprint: fp, Command: argv,
		MaxAttempts: 3, Lease: time.Hour,
		Owner: ledger.Owner{Host: "seedhost", BootID: "seed-boot", PIDNS: 1, PID: 4242, StartTime: 1}})
	if err != nil {
		return err
	}
	if res.Outcome != ledger.Reserved {
		return fmt.Errorf("%s exists", k)
	}
	if status == ledger.StatusInProgress {
		return nil
	}
	code, class := 0, ledger.ClassSuccess
	switch status {
	case ledger.StatusFailed:
		code, class = 3, ledger.ClassPermanent
	case ledger.StatusRetryable:
		code, class = 75, ledger.ClassInterrupted
	case ledger.StatusSucceeded:
	default:
		return fmt.Errorf("unknown status %q", status)
	}
	return l.Finish(ctx, ledger.FinishRequest{Key: k, Token: res.Token, AttemptID: res.AttemptID, Status: status,
		ExitCode: code, ExitSource: "child", Class: class, Duration: 1500 * time.Millisecond, TTL: ttl,
		OutputStored: true, Stdout: []byte("seeded " + k + "\n"), Stderr: []byte{}})
}

// httpsink URLFILE LOG [FAILS [KEY=HOLD]]: a stand-in for an HTTP API that
// honours Idempotency-Key. It listens on 127.0.0.1, writes its base URL to
// URLFILE, and appends one line per request to LOG: "KEY BODY" (the body's
// bytes with newlines as spaces), and every request's key, duplicates
// too, to LOG.requests. The first FAILS requests get 503. A repeated key
// gets 200 and "duplicate" without a new log line. With KEY=HOLD, the
// first request for KEY writes HOLD.held and is answered only once the
// file HOLD exists (a side effect still running). It exits after 60s.
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
	var holdKey, hold string
	if len(os.Args) > 4 {
		holdKey, hold, _ = strings.Cut(os.Args[4], "=")
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
		if f, err := os.OpenFile(logFile+".requests", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, k)
			f.Close()
		}
		if hold != "" && k == holdKey {
			h := hold
			hold = ""
			os.WriteFile(h+".held", nil, 0o644)
			mu.Unlock()
			for range 2000 {
				if _, err := os.Stat(h); err == nil {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			mu.Lock()
		}
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

// httppost URLFILE BODYFILE [N]: POST BODYFILE to the URL in URLFILE N
// times at once (1 by default), as a webhook sender delivering one event
// (again), and print each response as "STATUS BODY" (newlines in the body
// as " | "), sorted. A refused connection (the server still starting) is
// tried again for up to 10s.
func httppost() {
	url, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	body, err := os.ReadFile(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	n := 1
	if len(os.Args) > 3 {
		n = atoi(os.Args[3])
	}
	out := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for range 1000 {
				resp, err := http.Post(strings.TrimSpace(string(url)), "application/json", bytes.NewReader(body))
				if err != nil {
					out[i] = "error " + err.Error()
					time.Sleep(10 * time.Millisecond)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				out[i] = fmt.Sprintf("%d %s", resp.StatusCode, strings.ReplaceAll(strings.TrimRight(string(b), "\n"), "\n", " | "))
				return
			}
		})
	}
	wg.Wait()
	slices.Sort(out)
	for _, l := range out {
		fmt.Println(l)
	}
}

// freeport FILE writes a TCP port on 127.0.0.1 that was free a moment
// ago, for a server the script starts.
func freeport() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if err := os.WriteFile(os.Args[1], []byte(strconv.Itoa(port)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
