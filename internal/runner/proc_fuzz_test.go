package runner

import (
	"strings"
	"testing"
)

// FuzzProcStat: any process may name itself (comm) with spaces, ')' and
// digits, and /proc/PID/stat prints that name verbatim. The parser must
// still read the state, the process group and the start time that follow.
func FuzzProcStat(f *testing.F) {
	f.Add("sleep", byte('S'), int32(100), uint64(12345))
	f.Add("a) Z 1 2 3 4", byte('R'), int32(1), uint64(0))
	f.Add(") ) )", byte('Z'), int32(7), uint64(1<<63))
	f.Add("x\n1 (y)", byte('D'), int32(2147483647), uint64(42))
	f.Fuzz(func(t *testing.T, comm string, state byte, pgrp int32, start uint64) {
		if strings.ContainsRune(comm, 0) || len(comm) > 64 || pgrp <= 0 {
			return // the kernel cannot produce these
		}
		if !strings.ContainsRune("RSDZTtXIWPK", rune(state)) {
			state = 'S'
		}
		p := newFakeProc(t)
		p.add(4242, comm, state, int(pgrp), start)
		st, err := Host{Proc: p.dir}.stat(4242)
		if err != nil {
			t.Fatalf("comm %q: %v", comm, err)
		}
		if st.state != state || st.pgrp != int(pgrp) || st.start != start {
			t.Fatalf("comm %q: parsed %+v, want state %c pgrp %d start %d", comm, st, state, pgrp, start)
		}
	})
}
