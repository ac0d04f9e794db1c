package e2e

// A private PostgreSQL 15 server for one test: tests that stop, restart,
// fill or skew the server must never touch the shared one. It runs as the
// postgres user (initdb refuses root) from a directory of its own, on a
// free loopback port, with trust authentication.

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testenv"
)

const pgBinDir = "/usr/lib/postgresql/15/bin"

// libfaketime is Debian's faketime library (package faketime).
const libfaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

type pgPrivate struct {
	t    *testing.T
	dir  string // owned by postgres: the data directory, socket and log
	port int
	// faketime, when set, is the offset the server's clock runs at
	// (faketime's syntax, e.g. "+1h").
	faketime string
	dsn      string
}

type pgPrivateOptions struct {
	maxConnections int    // 0: PostgreSQL's default
	faketime       string // "": the real clock
}

// startPrivatePostgres initialises and starts a private server.
func startPrivatePostgres(t *testing.T, o pgPrivateOptions) *pgPrivate {
	t.Helper()
	_, err := os.Stat(filepath.Join(pgBinDir, "initdb"))
	testenv.Need(t, "postgresql-15", err == nil, pgBinDir+"/initdb is missing (Debian: apt-get install postgresql-15)")
	testenv.Need(t, "root", os.Geteuid() == 0, "a private PostgreSQL server runs as user postgres, which takes root to switch to")
	needTool(t, "runuser")
	if o.faketime != "" {
		needTool(t, "faketime")
		_, err := os.Stat(libfaketime)
		testenv.Need(t, "libfaketime", err == nil, libfaketime+" is missing (Debian: apt-get install faketime)")
	}
	pg, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("user postgres: %v", err)
	}
	uid, _ := strconv.Atoi(pg.Uid)
	gid, _ := strconv.Atoi(pg.Gid)
	dir, err := os.MkdirTemp("", "idem-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	p := &pgPrivate{t: t, dir: dir, port: port, faketime: o.faketime,
		dsn: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)}
	p.admin("initdb", "-D", p.data(), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
	conf := fmt.Sprintf("port = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nfsync = off\n", port, dir)
	if o.maxConnections > 0 {
		conf += fmt.Sprintf("max_connections = %d\nsuperuser_reserved_connections = 1\n", o.maxConnections)
	}
	f, err := os.OpenFile(filepath.Join(p.data(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(conf)
	f.Close()
	p.start()
	t.Cleanup(func() {
		exec.Command("runuser", "-u", "postgres", "--", filepath.Join(pgBinDir, "pg_ctl"), "-D", p.data(), "-m", "immediate", "stop").Run()
	})
	return p
}

func (p *pgPrivate) data() string { return filepath.Join(p.dir, "data") }

// admin runs a PostgreSQL program as user postgres.
func (p *pgPrivate) admin(prog string, args ...string) string {
	p.t.Helper()
	c := inherit(nil, "runuser", append([]string{"-u", "postgres", "--", filepath.Join(pgBinDir, prog)}, args...)...)
	c.dir, c.timeout = "/", 2*time.Minute
	return output(p.t, c)
}

// ctlArgv is the command line of pg_ctl ACTION on this server (under
// faketime when the server's clock is skewed), as user postgres.
func (p *pgPrivate) ctlArgv(action string) []string {
	argv := []string{"runuser", "-u", "postgres", "--"}
	if p.faketime != "" {
		// libfaketime itself: the faketime wrapper waits for the server
		// that pg_ctl leaves running. The monotonic clock stays real.
		argv = append(argv, "env", "LD_PRELOAD="+libfaketime, "FAKETIME="+p.faketime, "DONT_FAKE_MONOTONIC=1")
	}
	argv = append(argv, filepath.Join(pgBinDir, "pg_ctl"), "-D", p.data(), "-l", filepath.Join(p.dir, "log"), "-w", "-t", "60")
	if action == "stop" {
		argv = append(argv, "-m", "fast")
	}
	return append(argv, action)
}

func (p *pgPrivate) start() { p.ctl("start") }

// ctl runs pg_ctl action and fails the test unless it succeeds. Its output
// goes to a file: the server it starts would keep a pipe open.
func (p *pgPrivate) ctl(action string) {
	p.t.Helper()
	out, err := os.CreateTemp(p.dir, "pg_ctl-*.out")
	if err != nil {
		p.t.Fatal(err)
	}
	defer out.Close()
	argv := p.ctlArgv(action)
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir, c.Stdout, c.Stderr = "/", out, out
	if err := c.Run(); err != nil {
		b, _ := os.ReadFile(out.Name())
		log, _ := os.ReadFile(filepath.Join(p.dir, "log"))
		p.t.Fatalf("pg_ctl %s: %v\n%s\nlog:\n%s", action, err, b, log)
	}
}

// shellCtl is pg_ctl ACTION as one shell command line, for a child to run.
func (p *pgPrivate) shellCtl(action string) string {
	q := make([]string, 0, 16)
	for _, a := range p.ctlArgv(action) {
		q = append(q, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	return strings.Join(q, " ")
}
