package e2e

// What the tests need from outside the module: programs (strace, git, go,
// curl), a PostgreSQL server, pseudo-terminals. Every test asks here, and
// testenv.Need decides: skip when it is missing, or fail when
// IDEM_TEST_STRICT=1 (as in CI), so that a CI run never passes by skipping.

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/ledger/ledgertest"
	"github.com/idemhq/idem/internal/testenv"
)

// debianPackage names the package that provides a program, for the message
// of a test that needs it.
func debianPackage(program string) string {
	switch program {
	case "go":
		return "golang-go"
	case "promtool":
		return "prometheus"
	case "unshare", "nsenter", "setpriv":
		return "util-linux"
	case "timeout", "nohup":
		return "coreutils"
	case "systemd-analyze":
		return "systemd"
	case "busybox":
		return "busybox-static"
	}
	return program
}

// available reports whether a script or test finds name (a program on
// PATH, or "postgres"), and if not, why and how to provide it.
func available(name string) (ok bool, why string) {
	if name == "postgres" {
		return os.Getenv("IDEM_TEST_POSTGRES") != "",
			"IDEM_TEST_POSTGRES is not set (the DSN of a role with CREATE and CREATEDB; see CONTRIBUTING.md)"
	}
	if _, err := exec.LookPath(name); err == nil {
		return true, ""
	}
	why = name + " is not on PATH"
	why += " (Debian: apt-get install " + debianPackage(name) + ")"
	return false, why
}

// needTool returns the path of the program name.
func needTool(t testing.TB, name string) string {
	t.Helper()
	ok, why := available(name)
	testenv.Need(t, name, ok, why)
	path, _ := exec.LookPath(name)
	return path
}

// needStrace returns strace's path, once it has traced a process here
// (a container may forbid ptrace).
func needStrace(t testing.TB) string {
	t.Helper()
	strace := needTool(t, "strace")
	p := run(t, inherit(nil, strace, "-f", "-qq", "-e", "trace=none", "/bin/true"))
	testenv.Need(t, "ptrace", p.exitStatus == exitStatus{},
		"strace cannot trace here (ptrace not permitted?): "+p.String())
	return strace
}

// needPostgres returns IDEM_TEST_POSTGRES, the DSN of the test server.
func needPostgres(t testing.TB) string {
	t.Helper()
	return ledgertest.PostgresDSN(t)
}

// needPgBouncer returns IDEM_TEST_PGBOUNCER, the test database through a
// PgBouncer in transaction mode (see pgBouncerDSN for a test's own
// database).
func needPgBouncer(t testing.TB) string {
	t.Helper()
	return ledgertest.PgBouncerDSN(t)
}

// needRuntimeRole returns IDEM_TEST_POSTGRES_RUNTIME, the DSN of a login
// role with no rights of its own, and the role's name.
func needRuntimeRole(t testing.TB) (dsn, role string) {
	t.Helper()
	dsn = ledgertest.RuntimeDSN(t)
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil || u.User.Username() == "" {
		t.Fatalf("IDEM_TEST_POSTGRES_RUNTIME: want postgres://ROLE:PASSWORD@HOST:PORT/DATABASE (%v)", err)
	}
	return dsn, u.User.Username()
}

// needGitCheckout returns the module's root once git is there and the
// module is a git checkout (not, say, an unpacked archive).
func needGitCheckout(t testing.TB) string {
	t.Helper()
	git := needTool(t, "git")
	root := moduleRoot(t)
	c := inherit(nil, git, "rev-parse", "--git-dir")
	c.dir = root
	p := run(t, c)
	testenv.Need(t, "a git checkout", p.exitStatus == exitStatus{}, root+" is not a git checkout: "+p.String())
	return root
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// needProbeVar makes TestStrictMode, run again in a subprocess, a probe
// that asks for a program that does not exist, in the test itself ("tool")
// or in a script ("script").
const needProbeVar = "IDEM_E2E_NEED_PROBE"

// needProbe is what TestStrictMode runs in its subprocess.
func needProbe(t *testing.T, probe string) {
	switch probe {
	case "tool":
		needTool(t, "idem-no-such-program")
		t.Log("needTool returned")
	case "script":
		script := filepath.Join(t.TempDir(), "need.txtar")
		if err := os.WriteFile(script, []byte("need idem-no-such-program\nexec idem --version\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		runScripts(t, "", script)
	default:
		t.Fatalf("%s=%q: want tool or script", needProbeVar, probe)
	}
}

// TestStrictMode: a test or a script that needs a missing program skips,
// and fails instead when IDEM_TEST_STRICT=1. It runs this test binary
// again, as a probe that needs such a program.
func TestStrictMode(t *testing.T) {
	if probe := os.Getenv(needProbeVar); probe != "" {
		needProbe(t, probe)
		return
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, testenv.StrictVar+"=") {
			env = append(env, kv)
		}
	}
	for _, probe := range []string{"tool", "script"} {
		for _, strict := range []bool{false, true} {
			t.Run(probe+map[bool]string{true: "/strict", false: "/lenient"}[strict], func(t *testing.T) {
				e := append(env[:len(env):len(env)], needProbeVar+"="+probe, testenv.StrictVar+"="+map[bool]string{true: "1", false: "0"}[strict])
				p := run(t, command{argv: []string{os.Args[0], "-test.run=^TestStrictMode$", "-test.v", "-test.count=1"}, env: e})
				missing := regexp.MustCompile(`missing idem-no-such-program: idem-no-such-program is not on PATH`)
				switch {
				case !missing.MatchString(p.stdout):
					t.Errorf("the probe does not say what is missing: %v", p)
				case strict && (p.code != 1 || !strings.Contains(p.stdout, "--- FAIL: TestStrictMode")):
					t.Errorf("strict: want the probe to fail: %v", p)
				case !strict && (p.code != 0 || !strings.Contains(p.stdout, "--- SKIP: TestStrictMode")):
					t.Errorf("lenient: want the probe to skip: %v", p)
				case strings.Contains(p.stdout, "needTool returned"), strings.Contains(p.stdout, "idem version"):
					t.Errorf("the probe went on past the missing program: %v", p)
				}
			})
		}
	}
}

// TestScriptsUseNeed: a script that needs a program or server says so with
// need, which obeys IDEM_TEST_STRICT, never with a condition and skip.
func TestScriptsUseNeed(t *testing.T) {
	scripts, err := filepath.Glob("../../testscripts/*.txtar")
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts found: %v", err)
	}
	cond := regexp.MustCompile(`(?m)^\s*\[!?(exec:[^\]]*|postgres)\]`)
	for _, s := range scripts {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		if m := cond.Find(b); m != nil {
			t.Errorf("%s: %s: use need NAME, which fails in strict mode instead of skipping", filepath.Base(s), strings.TrimSpace(string(m)))
		}
	}
}
