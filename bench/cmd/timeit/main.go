// Command timeit runs commands many times, interleaved, and prints the median
// and p90 wall time of each, its peak RSS, and its difference from and ratio
// to the first command (the baseline) measured in the same run.
//
//	timeit [-n 200] [-warmup 10] [-names a,b] [-results FILE] CMD...
//
// Each CMD is one string split on spaces, or, prefixed "sh:", a shell
// command line (for pipes and redirections; the shell's own start-up then
// counts). "{n}" in a CMD is replaced with a value unique to each run,
// so that every `idem run --key k{n}` reserves a new key. Runs are
// interleaved (A B C A B C ...) so that noise from other work on the machine
// falls on every command alike. Peak RSS comes from wait4's rusage.
//
// With -phases, each run gets IDEM_PHASE_FILE: a build of idem or of
// bench/cmd/floor with -tags phases writes there when it passed each of its
// points (internal/probe), and timeit prints, for every command that wrote
// any, the median time of each point since the spawn and of each step.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type sample struct {
	wall   time.Duration
	cpu    time.Duration // user + system, the process and its children
	maxRSS int64         // KiB
	faults int64         // minor page faults (the process and its waited-for children)
	points []point       // with -phases: the points the run passed, in order
}

func main() {
	n := flag.Int("n", 200, "timed runs of each command")
	warmup := flag.Int("warmup", 10, "untimed runs of each command first")
	stdin := flag.String("stdin", "/dev/null", "file each run reads as stdin")
	stdout := flag.String("stdout", "/dev/null", "file each run writes stdout to")
	stderr := flag.String("stderr", "/dev/null", "file each run writes stderr to")
	names := flag.String("names", "", "comma-separated labels for the commands")
	failOK := flag.Bool("allow-fail", false, "do not stop at a non-zero exit")
	results := flag.String("results", "", "append one machine-readable line per command to FILE")
	phases := flag.Bool("phases", false, "collect the points of builds with -tags phases (IDEM_PHASE_FILE)")
	flag.Parse()
	cmds := flag.Args()
	if len(cmds) == 0 {
		fmt.Fprintln(os.Stderr, "timeit: no command")
		os.Exit(2)
	}
	labels := strings.Split(*names, ",")
	if *names == "" || len(labels) != len(cmds) {
		labels = cmds
	}
	files, err := openFiles(*stdin, *stdout, *stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "timeit:", err)
		os.Exit(2)
	}
	var phaseFile string
	if *phases {
		dir, err := os.MkdirTemp("", "timeit-phases-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "timeit:", err)
			os.Exit(2)
		}
		defer os.RemoveAll(dir)
		phaseFile = dir + "/points"
	}
	nonce := strconv.FormatInt(time.Now().UnixNano(), 36)
	seq := 0
	samples := make([][]sample, len(cmds))
	for i := 0; i < *warmup+*n; i++ {
		for j := range cmds {
			// Rotate the order so no command always runs right after another.
			k := (i + j) % len(cmds)
			seq++
			s, err := runOnce(cmds[k], nonce+"-"+strconv.Itoa(seq), files, phaseFile)
			if err != nil && !*failOK {
				fmt.Fprintf(os.Stderr, "timeit: %s: %v\n", cmds[k], err)
				os.Exit(1)
			}
			if i >= *warmup {
				samples[k] = append(samples[k], s)
			}
		}
	}
	var res *os.File
	if *results != "" {
		if res, err = os.OpenFile(*results, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "timeit:", err)
			os.Exit(2)
		}
		defer res.Close()
	}
	var base time.Duration
	for k, ss := range samples {
		walls := make([]time.Duration, len(ss))
		cpus := make([]time.Duration, len(ss))
		faults := make([]int64, len(ss))
		var rss int64
		for i, s := range ss {
			walls[i], cpus[i], faults[i] = s.wall, s.cpu, s.faults
			rss = max(rss, s.maxRSS)
		}
		slices.Sort(walls)
		slices.Sort(cpus)
		slices.Sort(faults)
		med, p10, p90 := pct(walls, 50), pct(walls, 10), pct(walls, 90)
		line := fmt.Sprintf("  %-16s median %10s  p10 %10s  p90 %10s  cpu %9s  faults %5d  peak RSS %7d KiB", labels[k], ms(med), ms(p10), ms(p90), ms(pct(cpus, 50)), faults[len(faults)/2], rss)
		if k == 0 {
			base = med
		} else {
			line += fmt.Sprintf("  vs %s: %+.3fms, ratio %.2f", labels[0], float64((med-base).Microseconds())/1000, float64(med)/float64(base))
		}
		fmt.Println(line)
		if res != nil {
			fmt.Fprintf(res, "%s median_us=%d p90_us=%d base_us=%d cpu_us=%d maxrss_kib=%d faults=%d n=%d\n",
				labels[k], med.Microseconds(), p90.Microseconds(), base.Microseconds(), pct(cpus, 50).Microseconds(), rss, faults[len(faults)/2], len(ss))
		}
	}
	if *phases {
		printPhases(labels, samples)
	}
}

func ms(d time.Duration) string {
	if d >= 10*time.Second {
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	return fmt.Sprintf("%.3fms", float64(d.Microseconds())/1000)
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted) - 1) * p / 100
	return sorted[i]
}

func openFiles(in, out, errPath string) ([]*os.File, error) {
	i, err := os.Open(in)
	if err != nil {
		return nil, err
	}
	o, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	e, err := os.OpenFile(errPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return []*os.File{i, o, e}, nil
}

func runOnce(cmd, unique string, files []*os.File, phaseFile string) (sample, error) {
	cmd = strings.ReplaceAll(cmd, "{n}", unique)
	var argv []string
	if line, ok := strings.CutPrefix(cmd, "sh:"); ok {
		argv = []string{"/bin/sh", "-c", line}
	} else {
		argv = strings.Fields(cmd)
	}
	path := argv[0]
	if !strings.Contains(path, "/") {
		p, err := lookPath(path)
		if err != nil {
			return sample{}, err
		}
		path = p
	}
	if _, err := files[0].Seek(0, 0); err != nil {
		return sample{}, err
	}
	attr := &os.ProcAttr{Files: files}
	if phaseFile != "" {
		if err := os.Remove(phaseFile); err != nil && !os.IsNotExist(err) {
			return sample{}, err
		}
		attr.Env = append(os.Environ(), "IDEM_PHASE_FILE="+phaseFile)
	}
	start := time.Now()
	p, err := os.StartProcess(path, argv, attr)
	if err != nil {
		return sample{}, err
	}
	var ws syscall.WaitStatus
	var ru syscall.Rusage
	for {
		_, err = syscall.Wait4(p.Pid, &ws, 0, &ru)
		if err != syscall.EINTR {
			break
		}
	}
	wall := time.Since(start)
	if err != nil {
		return sample{}, err
	}
	s := sample{wall: wall, cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), maxRSS: ru.Maxrss, faults: ru.Minflt}
	if phaseFile != "" {
		if s.points, err = readPoints(phaseFile, start, wall, ru.Minflt); err != nil {
			return s, err
		}
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return s, fmt.Errorf("exit status %v", ws)
	}
	return s, nil
}

func lookPath(name string) (string, error) {
	for _, dir := range strings.Split(os.Getenv("PATH"), ":") {
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in PATH", name)
}
