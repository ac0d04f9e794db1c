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
// serves it on /metrics.
func TestMetricsThroughNodeExporter(t *testing.T) {
	ne := needTool(t, "prometheus-node-exporter")
	env := metricsLedger(t)
	dir := filepath.Join(t.TempDir(), "textfile")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, inherit(env, idemBin(t), "metrics", "--textfile", filepath.Join(dir, "idem.prom"))).expect(0)

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
	}()
	var body string
	for try := 0; ; try++ { // until it listens
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr != nil {
				t.Fatal(rerr)
			}
			body = string(b)
			break
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
	for _, want := range []string{
		`idem_records{status="succeeded"} 1`,
		`idem_records{status="failed"} 1`,
		`idem_replays_total 1`,
		`idem_runs_total{outcome="failed"} 1`,
		`idem_last_success_timestamp_seconds{group="evt"} `,
		`node_textfile_scrape_error 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("node_exporter's /metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}
