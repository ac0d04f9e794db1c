package runner

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// LocalHost is this host as idem run finds it (cmd's hostLookup), all at
// once: its identity, and the process's working directory and user.
func LocalHost() Host {
	h := Identity()
	h.Cwd, _ = os.Getwd()
	h.User = UserName()
	return h
}

// fakeProc is a hand-made /proc: one stat file per pid.
type fakeProc struct {
	t   *testing.T
	dir string
}

func newFakeProc(t *testing.T) *fakeProc {
	return &fakeProc{t: t, dir: t.TempDir()}
}

// add writes /proc/PID/stat with the given comm, state, pgrp and start time.
func (p *fakeProc) add(pid int, comm string, state byte, pgrp int, start uint64) {
	p.t.Helper()
	dir := filepath.Join(p.dir, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	// Fields 1-22 as the kernel writes them (ppid, session... filler).
	stat := fmt.Sprintf("%d (%s) %c 1 %d %d 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 %d 1000 100\n",
		pid, comm, state, pgrp, pgrp, start)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

func TestOwnerDeadHandMade(t *testing.T) {
	const boot, pidns = "6c0d6e8e-7b43-4f53-9d7e-0a1b2c3d4e5f", 4026531836
	fp := newFakeProc(t)
	fp.add(100, "idem", 'S', 100, 5000)      // live owner
	fp.add(101, "idem", 'S', 101, 7777)      // pid reused by a later process
	fp.add(102, "idem", 'Z', 102, 5000)      // zombie
	fp.add(103, "my (idem) x", 'R', 103, 42) // comm with spaces and ')'
	fp.add(104, "idem", 'X', 104, 5000)      // dead, being reaped
	if err := os.MkdirAll(filepath.Join(fp.dir, "105"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(fp.dir, "105", "stat"), []byte("garbage"), 0o644) // unreadable: not known dead
	h := Host{Name: "here", BootID: boot, PIDNS: pidns, Proc: fp.dir}
	owner := func(pid int, start uint64) ledger.Owner {
		return ledger.Owner{Host: "here", BootID: boot, PIDNS: pidns, PID: pid, StartTime: start}
	}
	for _, tc := range []struct {
		name string
		o    ledger.Owner
		dead bool
	}{
		{"live owner", owner(100, 5000), false},
		{"live pid with another start time", owner(101, 5000), true},
		{"zombie", owner(102, 5000), true},
		{"exiting", owner(104, 5000), true},
		{"no such pid", owner(999, 5000), true},
		{"comm with spaces and parenthesis", owner(103, 42), false},
		{"comm with spaces, other start", owner(103, 43), true},
		{"malformed stat", owner(105, 5000), false},
		{"other boot id", ledger.Owner{Host: "here", BootID: "another-boot", PIDNS: pidns, PID: 999, StartTime: 1}, false},
		{"other pid namespace", ledger.Owner{Host: "here", BootID: boot, PIDNS: pidns + 1, PID: 999, StartTime: 1}, false},
		{"other host, no identity", ledger.Owner{Host: "there", PID: 999}, false},
		{"no pid recorded", owner(0, 0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := h.OwnerDead(tc.o); got != tc.dead {
				t.Errorf("OwnerDead(%+v) = %v, want %v", tc.o, got, tc.dead)
			}
		})
	}
	// A host that could not read its own identity knows no one dead.
	if (Host{Proc: fp.dir}).OwnerDead(owner(999, 5000)) {
		t.Error("a host without boot id declared an owner dead")
	}
}

func TestStatParsesCommWithParenthesis(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(7, ") S 9 (evil", 'T', 55, 123456)
	st, err := Host{Proc: fp.dir}.stat(7)
	if err != nil {
		t.Fatal(err)
	}
	if st.state != 'T' || st.pgrp != 55 || st.start != 123456 {
		t.Errorf("stat = %+v, want state T, pgrp 55, start 123456", st)
	}
}

// TestOwnerDeadRealProcesses checks liveness on this host's /proc with real
// processes: running, zombie (not waited for), and reaped.
func TestOwnerDeadRealProcesses(t *testing.T) {
	h := LocalHost()
	if h.BootID == "" || h.PIDNS == 0 {
		t.Skip("no /proc identity on this host")
	}
	self := h.Self()
	if h.OwnerDead(self) {
		t.Fatal("this test process is declared dead")
	}
	c := exec.Command("sleep", "30")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pid := c.Process.Pid
	st, err := h.stat(pid)
	if err != nil {
		t.Fatal(err)
	}
	o := ledger.Owner{Host: h.Name, BootID: h.BootID, PIDNS: h.PIDNS, PID: pid, StartTime: st.start}
	if h.OwnerDead(o) {
		t.Error("a running process is declared dead")
	}
	other := o
	other.StartTime++
	if !h.OwnerDead(other) {
		t.Error("a pid with another start time is declared alive")
	}
	c.Process.Signal(syscall.SIGKILL)
	// Not waited for yet: a zombie.
	for range 1000 {
		if st, _ := h.stat(pid); st.state == 'Z' {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if !h.OwnerDead(o) {
		t.Error("a zombie is declared alive")
	}
	c.Wait()
	if !h.OwnerDead(o) {
		t.Error("a reaped process is declared alive")
	}
}

// TestGroupLiveIgnoresZombies: a group whose only member is a zombie (an
// orphan PID 1 never reaps) is gone, though kill(-pgid, 0) still succeeds.
func TestGroupLiveIgnoresZombies(t *testing.T) {
	h := LocalHost()
	c := exec.Command("sleep", "30")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := c.Process.Pid
	defer c.Wait()
	if !h.groupLive(pgid) {
		t.Fatal("a running group is declared gone")
	}
	c.Process.Signal(syscall.SIGKILL)
	for range 1000 {
		if st, _ := h.stat(pgid); st.state == 'Z' {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if syscall.Kill(-pgid, 0) != nil {
		t.Skip("kill(-pgid, 0) already fails for a zombie group here")
	}
	if h.groupLive(pgid) {
		t.Error("a group of zombies is declared live")
	}
}
