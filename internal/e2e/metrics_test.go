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
// collector, reading dir, and returns its /metrics and what it logged.
func scrapeNodeExporter(t *testing.T, dir string) (body, logs string) {
	t.Helper()
	ne := needTool(t, "prometheus-node-exporter")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p := start(t, inherit(nil, ne, "--web.listen-address="+addr, "--collector.disable-defaults",
		"--collector.textfile", "--collector.textfile.directory", dir))
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
