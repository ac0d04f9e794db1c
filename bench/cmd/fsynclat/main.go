// Command fsynclat prints the median and p90 latency of fsync after a small
// write, in a directory: what a durable commit pays on this disk now.
//
//	fsynclat [-n 200] DIR
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

func main() {
	n := flag.Int("n", 200, "fsyncs to time")
	flag.Parse()
	dir := flag.Arg(0)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "fsynclat-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fsynclat:", err)
		os.Exit(1)
	}
	defer os.Remove(filepath.Clean(f.Name()))
	defer f.Close()
	d := make([]time.Duration, 0, *n)
	for i := range *n {
		if _, err := f.WriteAt([]byte("idem"), int64(i)*4096); err != nil {
			fmt.Fprintln(os.Stderr, "fsynclat:", err)
			os.Exit(1)
		}
		start := time.Now()
		if err := f.Sync(); err != nil {
			fmt.Fprintln(os.Stderr, "fsynclat:", err)
			os.Exit(1)
		}
		d = append(d, time.Since(start))
	}
	slices.Sort(d)
	fmt.Printf("fsync after a 4-byte write: median %.3f ms, p90 %.3f ms (%d runs)\n",
		float64(d[len(d)/2].Microseconds())/1000, float64(d[len(d)*9/10].Microseconds())/1000, len(d))
}
