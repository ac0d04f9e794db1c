package main

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// point is one point a run passed, as time since the spawn, and the minor
// page faults the process had taken by then (-1: not known).
type point struct {
	name   string
	at     time.Duration
	faults int64
}

// readPoints reads the "NAME UNIXNANO [MINFLT]" lines a -tags phases build
// wrote, keeps the first time of each name, and adds "reaped", when wait4
// returned, with the process's faults from its rusage. A command that
// wrote no file passed no point.
func readPoints(path string, spawn time.Time, wall time.Duration, faults int64) ([]point, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var pts []point
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			return nil, fmt.Errorf("%s: bad line %q", path, sc.Text())
		}
		n, err := strconv.ParseInt(fs[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: bad line %q", path, sc.Text())
		}
		flt := int64(-1)
		if len(fs) > 2 {
			flt, _ = strconv.ParseInt(fs[2], 10, 64)
		}
		if !seen[fs[0]] {
			seen[fs[0]] = true
			pts = append(pts, point{fs[0], time.Unix(0, n).Sub(spawn), flt})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(pts) == 0 {
		return nil, nil
	}
	return append(pts, point{"reaped", wall, faults}), nil
}

// printPhases prints, for each command whose runs passed points, the
// median time of each point since the spawn and the median step from the
// point before it; then, for the points every such command passed, the
// last two commands' median steps between them and the last one's
// difference from the one before it.
func printPhases(labels []string, samples [][]sample) {
	var cmds []int
	for k, ss := range samples {
		if len(ss) > 0 && len(ss[0].points) > 0 {
			cmds = append(cmds, k)
		}
	}
	if len(cmds) == 0 {
		return
	}
	fmt.Println()
	fmt.Println("  points (ms since the spawn, median of the runs; step: from the point before, median;")
	fmt.Println("  faults: minor page faults in the step, median)")
	for _, k := range cmds {
		fmt.Printf("  %s\n", labels[k])
		for _, name := range order(samples[k]) {
			at, step := medians(samples[k], name, nil)
			fmt.Printf("    %-20s at %7.3f  step %7.3f  faults %5d\n", name, msf(at), msf(step), faultStep(samples[k], name))
		}
	}
	if len(cmds) < 2 {
		return
	}
	common := order(samples[cmds[0]])
	for _, k := range cmds[1:] {
		names := order(samples[k])
		common = slices.DeleteFunc(common, func(n string) bool { return !slices.Contains(names, n) })
	}
	first, last := cmds[len(cmds)-2], cmds[len(cmds)-1]
	fmt.Println()
	fmt.Printf("  steps between the points both passed (median, ms): %s, %s, difference\n", labels[first], labels[last])
	for _, name := range common {
		_, a := medians(samples[first], name, common)
		_, b := medians(samples[last], name, common)
		fmt.Printf("    to %-20s %7.3f  %7.3f  %+7.3f\n", name, msf(a), msf(b), msf(b-a))
	}
}

// order is the names of the points of the first run that passed the most.
func order(ss []sample) []string {
	var names []string
	for _, s := range ss {
		if len(s.points) > len(names) {
			names = names[:0]
			for _, p := range s.points {
				names = append(names, p.name)
			}
		}
	}
	return names
}

// medians is the median time of point name since the spawn, and the median
// step to it from the point before it in each run (counting only the points
// in among, when among is not nil).
func medians(ss []sample, name string, among []string) (at, step time.Duration) {
	var ats, steps []time.Duration
	for _, s := range ss {
		var prev time.Duration
		for _, p := range s.points {
			if among != nil && !slices.Contains(among, p.name) {
				continue
			}
			if p.name == name {
				ats = append(ats, p.at)
				steps = append(steps, p.at-prev)
				break
			}
			prev = p.at
		}
	}
	slices.Sort(ats)
	slices.Sort(steps)
	return pct(ats, 50), pct(steps, 50)
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// faultStep is the median of the minor page faults each run took between
// the point before name and name (-1 when the runs did not say).
func faultStep(ss []sample, name string) int64 {
	var steps []int64
	for _, s := range ss {
		var prev int64
		for _, p := range s.points {
			if p.name == name {
				if p.faults >= 0 && prev >= 0 {
					steps = append(steps, p.faults-prev)
				}
				break
			}
			prev = p.faults
		}
	}
	if len(steps) == 0 {
		return -1
	}
	slices.Sort(steps)
	return steps[len(steps)/2]
}
