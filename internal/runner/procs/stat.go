package procs

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
)

// Stat is what idem reads of a process from /proc/PID/stat.
type Stat struct {
	State byte   // field 3: R, S, D, Z, X, T...
	Pgrp  int    // field 5
	Start uint64 // field 22: clock ticks since boot
}

// Gone reports whether the process has exited (a zombie waits only to be
// reaped; it runs nothing).
func (s Stat) Gone() bool { return s.State == 'Z' || s.State == 'X' }

// ParseStat parses the contents of /proc/PID/stat. The comm field may hold
// spaces and ')', so the fields are read from the last ')'.
func ParseStat(b []byte) (Stat, error) {
	malformed := errors.New("malformed stat")
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, malformed
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state), fields[2] field 5, fields[19] field 22.
	if len(fields) < 20 || len(fields[0]) != 1 {
		return Stat{}, malformed
	}
	pgrp, err := strconv.Atoi(fields[2])
	if err != nil {
		return Stat{}, malformed
	}
	start, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return Stat{}, malformed
	}
	return Stat{State: fields[0][0], Pgrp: pgrp, Start: start}, nil
}
