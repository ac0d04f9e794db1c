package e2e

// The crontab lines idem documents (README, docs/, --help, the man page),
// run the way Debian's cron runs them: cron's environment exactly (env -i
// with PATH=/usr/bin:/bin, HOME from the password database, SHELL=/bin/sh,
// LOGNAME; no XDG variables, no terminal), the crontab's assignments over
// it, the command through /bin/sh -c after crontab(5)'s % rule. idem is
// "installed" in /usr/local/bin and the home directory is a temporary one:
// each run is in a private mount namespace (unshare -m) with bind mounts
// over /usr/local/bin and the home directory, so the machine's stay as
// they are.

import (
	"errors"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testenv"
)

// crontab is the crontab lines of one example: assignments and the
// command part of each job line.
type crontab struct {
	source string
	env    []string
	jobs   []string
}

var (
	cronAssign = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=\S*$`)
	cronJob    = regexp.MustCompile(`^(?:[0-9*/,-]+[ \t]+){5}(.+)$`)
)

// crontabs finds the crontab examples in text: runs of comment,
// assignment and job lines (indented alike or not) that hold a job.
func crontabs(source, text string) []crontab {
	var (
		out []crontab
		cur crontab
	)
	flush := func() {
		if len(cur.jobs) > 0 {
			out = append(out, cur)
		}
		cur = crontab{source: source}
	}
	flush()
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		switch m := cronJob.FindStringSubmatch(l); {
		case m != nil:
			cur.jobs = append(cur.jobs, m[1])
		case strings.HasPrefix(l, "#"):
		case cronAssign.MatchString(l):
			cur.env = append(cur.env, l)
		default:
			flush()
		}
	}
	flush()
	return out
}

// cronCommand applies crontab(5)'s rule to a job's command: "Percent-signs
// (%) in the command, unless escaped with backslash (\), will be changed
// into newline characters, and all data after the first % will be sent to
// the command as standard input." A documented line must not rely on that
// by accident: an unescaped % is an error; \% becomes %.
func cronCommand(t *testing.T, c crontab, job string) string {
	t.Helper()
	for i := 0; i < len(job); i++ {
		if job[i] == '%' && (i == 0 || job[i-1] != '\\') {
			t.Errorf("%s: cron would cut this line at the unescaped %% (byte %d): %s", c.source, i, job)
		}
	}
	return strings.ReplaceAll(job, `\%`, `%`)
}

// unroff undoes the escapes cmd/man.go writes.
func unroff(s string) string {
	return strings.NewReplacer(`\e`, `\`, `\-`, `-`, `\&`, ``).Replace(s)
}

// cronRig runs commands as cron would, as root, with idem and a backup
// job in a temporary /usr/local/bin and a temporary home directory.
type cronRig struct {
	t        *testing.T
	unshare  string
	bin      string
	home     string // the bind mount's source
	homePath string // root's home directory, as the password database says
	dir      string
}

func newCronRig(t *testing.T) *cronRig {
	t.Helper()
	testenv.Need(t, "root", os.Geteuid() == 0, "bind mounts in a private mount namespace need root")
	g := &cronRig{t: t, unshare: needTool(t, "unshare")}
	u, err := user.Current()
	if err != nil || !filepath.IsAbs(u.HomeDir) {
		t.Fatalf("root's home directory: %v %v", u, err)
	}
	g.homePath = u.HomeDir
	for _, d := range []string{"/usr/local/bin", g.homePath} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Fatalf("%s is not a directory to mount over: %v", d, err)
		}
	}
	g.dir = t.TempDir()
	g.bin = mkdir(t, filepath.Join(g.dir, "bin"), 0o755)
	g.home = mkdir(t, filepath.Join(g.dir, "home"), 0o700)
	copyExe(t, idemBin(t), g.bin)
	backup := "#!/bin/sh\n" +
		"# a backup job that runs until the test releases it\n" +
		"echo \"run $IDEM_ATTEMPT\" >> \"$HOME/backup.log\"\n" +
		"while [ ! -e \"$HOME/release\" ]; do sleep 0.05; done\n" +
		"echo \"backup done\"\n"
	for _, d := range []string{g.bin, mkdir(t, filepath.Join(g.home, "bin"), 0o755)} {
		if err := os.WriteFile(filepath.Join(d, "backup"), []byte(backup), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

// command is argv in a private mount namespace with the rig's mounts, its
// stderr appended to errFile.
func (g *cronRig) command(errFile string, argv ...string) command {
	return g.commandOver(errFile, "", "", argv...)
}

// commandOver is command with one more bind mount, of the directory src
// over dst, when dst is not "".
func (g *cronRig) commandOver(errFile, src, dst string, argv ...string) command {
	script := `mount --bind "$1" /usr/local/bin && mount --bind "$2" "$3" && ` +
		`{ [ -z "$6" ] || mount --bind "$5" "$6"; } && err=$4 && shift 6 && exec "$@" 2>>"$err"`
	c := clean(nil, g.unshare, append([]string{"-m", "--propagation", "private", "/bin/sh", "-c", script, "sh",
		g.bin, g.home, g.homePath, errFile, src, dst}, argv...)...)
	c.dir = "/"
	return c
}

// cronEnv is cron's environment for root's jobs, then the crontab's
// assignments, as env(1) arguments.
func (g *cronRig) cronEnv(assign []string) []string {
	return append([]string{"/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "HOME=" + g.homePath, "SHELL=/bin/sh", "LOGNAME=root"}, assign...)
}

func (g *cronRig) read(name string) string {
	b, _ := os.ReadFile(filepath.Join(g.dir, name))
	return string(b)
}

// until polls cond for at most 10s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 1000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestCrontabUnderCron: every documented crontab line obeys crontab(5)'s %
// rule and, under cron's environment, finds idem and the default ledger;
// fired twice at once (cron fires twice, or two hosts share a ledger), the
// job runs once, the second firing waits for the first and replays it, and
// both exit 0 (no mail about an error).
func TestCrontabUnderCron(t *testing.T) {
	busy(t)
	root := moduleRoot(t)
	var tabs []crontab
	for _, file := range docFiles(t, root) {
		blocks, err := testedBlocks(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			tabs = append(tabs, crontabs(file, strings.Join(b.lines, "\n"))...)
		}
	}
	idem := idemBin(t)
	for _, src := range [][]string{{"--help"}, {"run", "--help"}, {"man"}} {
		out := output(t, clean(nil, idem, src...))
		tabs = append(tabs, crontabs("idem "+strings.Join(src, " "), unroff(out))...)
	}
	count := map[string]int{}
	for _, c := range tabs {
		count[c.source]++
	}
	for src, want := range map[string]int{"README.md": 1, "docs/recipes.md": 1, "docs/operators.md": 1, "idem --help": 1, "idem run --help": 1, "idem man": 2} {
		if count[src] < want {
			t.Errorf("%s shows %d crontab examples, want at least %d", src, count[src], want)
		}
	}
	for i, c := range tabs {
		for _, job := range c.jobs {
			cmd := cronCommand(t, c, job)
			if strings.Contains(cmd, "--period") {
				// A key per period, fired every few minutes: the catch-up
				// recipe, run by recipes_catchup.txtar and, under cron's
				// environment across simulated days, TestCatchUpUnderCron.
				continue
			}
			if strings.Contains(cmd, "idem metrics") {
				t.Run(strings.ReplaceAll(c.source, " ", "_")+"/metrics", func(t *testing.T) {
					t.Logf("%d: %s: %q %s", i, c.source, c.env, cmd)
					cronMetrics(t, c, cmd)
				})
				continue
			}
			t.Run(strings.ReplaceAll(c.source, " ", "_"), func(t *testing.T) {
				t.Logf("%d: %s: %q %s", i, c.source, c.env, cmd)
				g := newCronRig(t)
				argv := append(g.cronEnv(c.env), "/bin/sh", "-c", cmd)
				first := start(t, g.command(filepath.Join(g.dir, "err1"), argv...))
				until(t, "the first firing's job to start", func() bool {
					select {
					case <-first.done:
						first.wait()
						t.Fatalf("the first firing ended before its job was released: %v\n%s", first, g.read("err1"))
					default:
					}
					return strings.Contains(g.read("home/backup.log"), "run 1")
				})
				second := start(t, g.command(filepath.Join(g.dir, "err2"), argv...))
				until(t, "the second firing to wait, or end", func() bool {
					select {
					case <-second.done:
						return true
					default:
					}
					return strings.Contains(g.read("err2"), "waiting for it")
				})
				if err := os.WriteFile(filepath.Join(g.home, "release"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				first.wait()
				second.wait()
				if first.exitStatus != (exitStatus{}) || second.exitStatus != (exitStatus{}) {
					t.Fatalf("cron would mail an error:\nfirst: %v\n%s\nsecond: %v\n%s", first, g.read("err1"), second, g.read("err2"))
				}
				if got := g.read("home/backup.log"); got != "run 1\n" {
					t.Errorf("the job ran more than once: backup.log:\n%s", got)
				}
				if !strings.Contains(second.stdout, "backup done") || !strings.Contains(g.read("err2"), "idem: replayed backup:") {
					t.Errorf("the second firing did not replay the first: %v\n%s", second, g.read("err2"))
				}
				if _, err := os.Stat(filepath.Join(g.home, ".local", "state", "idem", "ledger.db")); err != nil {
					t.Errorf("the ledger is not the home directory's default one: %v", err)
				}
			})
		}
	}
}

// debianTextfileDir is node_exporter's textfile directory on Debian.
const debianTextfileDir = "/var/lib/prometheus/node-exporter"

// cronMetrics runs a documented `idem metrics --textfile FILE` crontab line
// once under cron's environment, with a temporary directory mounted over
// FILE's directory, after a run has recorded a key in the default ledger:
// it exits 0 and writes the ledger's metrics to FILE.
func cronMetrics(t *testing.T, c crontab, cmd string) {
	f := strings.Fields(cmd)
	file := f[len(f)-1]
	if !strings.HasSuffix(file, ".prom") || !filepath.IsAbs(file) {
		t.Fatalf("%s: the metrics line does not end in an absolute .prom file: %s", c.source, cmd)
	}
	g := newCronRig(t)
	dst := filepath.Dir(file)
	src := mkdir(t, filepath.Join(g.dir, "textfile"), 0o755)
	out := src
	if _, err := os.Stat(dst); errors.Is(err, fs.ErrNotExist) && dst != debianTextfileDir {
		// A directory the recipe has root create (a user's own): a
		// scratch one stands in for its parent, the directory inside.
		out = mkdir(t, filepath.Join(src, filepath.Base(dst)), 0o755)
		dst = filepath.Dir(dst)
	} else if fi, err := os.Stat(dst); err != nil || !fi.IsDir() {
		testenv.Need(t, dst, false, "the textfile directory of node_exporter's Debian package (prometheus-node-exporter)")
	}
	seed := append(g.cronEnv(c.env), "/bin/sh", "-c", "idem run --key cron:metrics-seed -- true")
	if p := run(t, g.command(filepath.Join(g.dir, "err0"), seed...)); p.exitStatus != (exitStatus{}) {
		t.Fatalf("seeding the ledger: %v\n%s", p, g.read("err0"))
	}
	p := run(t, g.commandOver(filepath.Join(g.dir, "err1"), src, dst, append(g.cronEnv(c.env), "/bin/sh", "-c", cmd)...))
	if p.exitStatus != (exitStatus{}) {
		t.Fatalf("cron would mail an error: %v\n%s", p, g.read("err1"))
	}
	got, err := os.ReadFile(filepath.Join(out, filepath.Base(file)))
	if err != nil {
		t.Fatalf("the metrics line wrote no %s: %v", file, err)
	}
	if !regexp.MustCompile(`(?m)^idem_records\{status="succeeded",ledger="[^"]+"\} 1$`).Match(got) {
		t.Errorf("%s does not count the seeded record:\n%s", file, got)
	}
}

// TestHomeFromPasswd: a daemon's environment without HOME (Debian's
// webhook.service) finds the default ledger in the home directory the
// password database gives; a user with no home there at all gets exit 74
// and a hint to set IDEM_LEDGER.
func TestHomeFromPasswd(t *testing.T) {
	g := newCronRig(t)
	env := []string{"/usr/bin/env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin"}
	p := run(t, g.command(filepath.Join(g.dir, "err"), append(env, "idem", "run", "--key", "home:from-passwd", "--", "/bin/true")...))
	if p.exitStatus != (exitStatus{}) {
		t.Fatalf("without HOME: %v\n%s", p, g.read("err"))
	}
	if _, err := os.Stat(filepath.Join(g.home, ".local", "state", "idem", "ledger.db")); err != nil {
		t.Errorf("the ledger is not in the password database's home directory: %v", err)
	}

	setpriv := needTool(t, "setpriv")
	const stranger = "54321" // a uid the password database does not know
	if _, err := user.LookupId(stranger); err == nil {
		t.Fatalf("uid %s is in the password database", stranger)
	}
	argv := append([]string{setpriv, "--reuid", stranger, "--regid", stranger, "--clear-groups"}, env...)
	p = run(t, g.command(filepath.Join(g.dir, "err-stranger"), append(argv, "idem", "run", "--key", "home:nowhere", "--", "/bin/true")...))
	stderr := g.read("err-stranger")
	if p.exitStatus != (exitStatus{code: 74}) {
		t.Fatalf("no home at all: %v, want exit 74\n%s", p, stderr)
	}
	want := regexp.MustCompile(`^idem: error: cannot find the default ledger: HOME is not set and the password database has no home directory for uid 54321\nidem: hint: set IDEM_LEDGER to the ledger's path \(or HOME\)\n$`)
	if !want.MatchString(stderr) {
		t.Errorf("no home at all: stderr:\n%s", stderr)
	}
}
