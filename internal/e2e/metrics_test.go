package e2e

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// metricsLedger makes a ledger with a success, a failure and a replay,
// and returns the environment that points idem at it.
func metricsLedger(t *testing.T) []string {
	t.Helper()
	idem := idemBin(t)
	env := []string{"IDEM_LEDGER=" + filepath.Join(t.TempDir(), "ledger.db")}
	run(t, inherit(env, idem, "run", "--key", "evt:prom:ok-1", "--", "true")).expect(0)
	run(t, inherit(env, idem, "run", "--key", "evt:prom:ok-1", "--", "true")).expect(0)
	run(t, inherit(env, idem, "run", "--key", "backup.db1:prom:bad-1", "--", "false")).expect(1)
	return env
}

// TestMetricsPassPromtool: Prometheus's own linter accepts idem metrics'
// output (names, units, HELP and TYPE, label escaping).
func TestMetricsPassPromtool(t *testing.T) {
	promtool := needTool(t, "promtool")
	env := metricsLedger(t)
	out := output(t, inherit(env, idemBin(t), "metrics"))
	c := inherit(nil, promtool, "check", "metrics")
	c.stdin = strings.NewReader(out)
	p := run(t, c)
	if p.exitStatus != (exitStatus{}) || strings.TrimSpace(p.stdout+p.stderr) != "" {
		t.Fatalf("promtool check metrics found problems: %v\ninput:\n%s", p, out)
	}
}

// TestMetricsThroughNodeExporter: node_exporter's textfile collector
// reads what idem metrics --textfile writes, without a scrape error, and
// serves it on /metrics; two ledgers exported to one directory stay apart
// by their ledger label (without it node_exporter drops one ledger's
// series as "collected before with the same name and label values").
func TestMetricsThroughNodeExporter(t *testing.T) {
	env := metricsLedger(t)
	other := []string{"IDEM_LEDGER=" + filepath.Join(t.TempDir(), "other.db")}
	run(t, inherit(other, idemBin(t), "run", "--key", "evt:other:ok-1", "--", "true")).expect(0)
	dir := filepath.Join(t.TempDir(), "textfile")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, inherit(env, idemBin(t), "metrics", "--textfile", filepath.Join(dir, "idem.prom"))).expect(0)
	run(t, inherit(other, idemBin(t), "metrics", "--label", "ledger=other", "--textfile", filepath.Join(dir, "other.prom"))).expect(0)
	body, logs := scrapeNodeExporter(t, dir)
	main := strings.TrimPrefix(env[0], "IDEM_LEDGER=")
	for _, want := range []string{
		`idem_records{ledger="` + main + `",status="succeeded"} 1`,
		`idem_records{ledger="` + main + `",status="failed"} 1`,
		`idem_replays_total{ledger="` + main + `"} 1`,
		`idem_runs_total{ledger="` + main + `",outcome="failed"} 1`,
		`idem_last_success_timestamp_seconds{group="evt",ledger="` + main + `"} `,
		`idem_records{ledger="other",status="succeeded"} 1`,
		`idem_records{ledger="other",status="failed"} 0`,
		`idem_replays_total{ledger="other"} 0`,
		`node_textfile_scrape_error 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("node_exporter's /metrics lacks %q", want)
		}
	}
	if strings.Contains(logs, "collected before") {
		t.Errorf("node_exporter found duplicate series:\n%s", logs)
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s\nnode_exporter's log:\n%s", body, logs)
	}
}

// scrapeNodeExporter starts node_exporter with only the textfile
// collector, reading dir, behind wrap (e.g. setpriv to another user), and
// returns its /metrics and what it logged.
func scrapeNodeExporter(t *testing.T, dir string, wrap ...string) (body, logs string) {
	t.Helper()
	ne := needTool(t, "prometheus-node-exporter")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := inherit(nil, ne, "--web.listen-address="+addr, "--collector.disable-defaults",
		"--collector.textfile", "--collector.textfile.directory", dir)
	c.wrap = wrap
	p := start(t, c)
	defer func() {
		p.send(syscall.SIGTERM)
		p.wait()
		logs = p.stderr
	}()
	for try := 0; ; try++ { // until it listens
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr != nil {
				t.Fatal(rerr)
			}
			return string(b), ""
		}
		select {
		case <-p.done:
			p.wait()
			t.Fatalf("node_exporter ended: %v", p)
		default:
		}
		if try > 300 {
			t.Fatalf("node_exporter does not answer on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMetricsTextfileAsOtherUser: docs/operators.md's recipe for a ledger
// user other than root works as that user (nobody here, with the recipe's
// paths moved into a scratch directory): root's one-time setup, then the
// crontab line under cron's environment as nobody, and node_exporter, as
// yet another user (daemon), reads the file through the link, where the
// root recipe's line fails for nobody with exit 74.
func TestMetricsTextfileAsOtherUser(t *testing.T) {
	needTool(t, "runuser")
	setpriv := needTool(t, "setpriv")
	unshare := needTool(t, "unshare")
	root := moduleRoot(t)
	blocks, err := testedBlocks(filepath.Join(root, "docs", "operators.md"))
	if err != nil {
		t.Fatal(err)
	}
	var setup, tab []string
	for _, b := range blocks {
		switch {
		case b.script != "testscripts/metrics_nonroot.txtar":
		case setup == nil:
			setup = b.lines
		default:
			tab = b.lines
		}
	}
	if setup == nil || tab == nil {
		t.Fatalf("docs/operators.md has no setup and crontab blocks tested by metrics_nonroot.txtar")
	}
	sd := sharedDir(t)
	bin := mkdir(t, filepath.Join(sd, "bin"), 0o755)
	copyExe(t, idemBin(t), bin)
	ne := mkdir(t, filepath.Join(sd, "node-exporter"), 0o755) // root:root 0755, as Debian's
	own := filepath.Join(sd, "idem-metrics")
	state := mkdir(t, filepath.Join(sd, "state"), 0o700)
	if err := os.Chown(state, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	ledgerEnv := "IDEM_LEDGER=" + filepath.Join(state, "ledger.db")
	asNobody := []string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"}
	path := "PATH=" + bin + ":/usr/local/bin:/usr/bin:/bin"
	seed := clean([]string{ledgerEnv, path}, filepath.Join(bin, "idem"), "run", "--key", "backup:nonroot", "--", "true")
	seed.wrap, seed.dir = asNobody, sd
	run(t, seed).expect(0)

	// The root recipe's line, as nobody: the directory is root's.
	direct := clean([]string{ledgerEnv, path}, filepath.Join(bin, "idem"), "metrics", "--textfile", filepath.Join(ne, "idem.prom"))
	direct.wrap, direct.dir = asNobody, sd
	run(t, direct).expect(74)

	moved := strings.NewReplacer("/var/lib/idem-metrics", own, "/var/lib/prometheus/node-exporter", ne,
		"-o backup -g backup", "-o nobody -g nogroup", "runuser -u backup", "runuser -u nobody")
	script := moved.Replace(strings.Join(setup, "\n"))
	p := run(t, clean([]string{ledgerEnv, path + ":/usr/sbin:/sbin"}, "/bin/sh", "-ec", script))
	if p.exitStatus != (exitStatus{}) {
		t.Fatalf("the setup, as root: %v\n%s", p, script)
	}
	tabs := crontabs("docs/operators.md", strings.Join(tab, "\n"))
	if len(tabs) != 1 || len(tabs[0].jobs) != 1 {
		t.Fatalf("the crontab block has %d crontabs, want one with one job: %q", len(tabs), tab)
	}
	cmd := moved.Replace(cronCommand(t, tabs[0], tabs[0].jobs[0]))
	// cron's environment for nobody's job; idem found on the crontab's
	// PATH through a private mount over /usr/local/bin.
	env := append([]string{"/usr/bin/env", "-i", "HOME=/nonexistent", "SHELL=/bin/sh", "LOGNAME=nobody", ledgerEnv}, tabs[0].env...)
	job := clean(nil, unshare, append([]string{"-m", "--propagation", "private", "/bin/sh", "-c",
		`mount --bind "$1" /usr/local/bin && shift && exec "$@"`, "sh", bin}, append(append(asNobody, env...), "/bin/sh", "-c", cmd)...)...)
	job.dir = "/"
	run(t, job).expect(0)
	if fi, err := os.Stat(filepath.Join(own, "idem.prom")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != nobody {
		t.Fatalf("the job wrote no idem.prom of nobody's in its directory: %v", err)
	}

	body, logs := scrapeNodeExporter(t, ne, setpriv, "--reuid=daemon", "--regid=daemon", "--clear-groups")
	for _, want := range []string{
		`idem_records{ledger="` + filepath.Join(state, "ledger.db") + `",status="succeeded"} 1`,
		`node_textfile_scrape_error 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("node_exporter's /metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s\nnode_exporter's log:\n%s", body, logs)
	}
}
