package integration_test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/windlass-dev/windlass/internal/fleettest"
)

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// promValue finds the value of the metric family's point whose labels
// include every label given; ok is false when there is none.
func promValue(families map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f, found := families[name]
	if !found {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// TestCLIFleetStatusAndMetrics starts `windlass dev --metrics-listen`,
// makes a call and holds a gated one, then reads the fleet view with
// `windlass status` (table, --json, --watch) and scrapes dev's /metrics
// over HTTP, which must parse as the Prometheus text format.
func TestCLIFleetStatusAndMetrics(t *testing.T) {
	bin := cliBuild(t)
	devFile := filepath.Join(t.TempDir(), "windlass", "dev.json")
	metricsAddr := freeAddr(t)
	env := append(cliEnv(devFile), "TMPDIR="+t.TempDir(), "WINDLASS_METRICS_LISTEN="+metricsAddr)
	dev := cliStartDev(t, bin, env)
	dev.waitStdout(t, 90*time.Second, "banner and self-check", func(out string) bool {
		return strings.Contains(out, "Windlass dev fleet is running.") && cliHasLine(out, "check", "-> 3")
	})
	cmdEnv := cliEnv(devFile) // commands do not serve metrics

	if r := cliRun(t, bin, cmdEnv, "call", "add", `{"a":2,"b":3}`); r.code != 0 || strings.TrimSpace(r.stdout) != "5" {
		t.Fatalf("call add: %s", r)
	}
	if r := cliRun(t, bin, cmdEnv, "call", "transfer_funds", `{"to":"bob","amount":5}`, "--async", "--id", "held-1"); r.code != 0 {
		t.Fatalf("call transfer_funds --async: %s", r)
	}

	var fleet struct {
		Tools []struct {
			Tool             string
			RequiresApproval bool     `json:"requires_approval"`
			LiveWorkers      []string `json:"live_workers"`
			Queued           uint64
			InFlight         int `json:"in_flight"`
			Redelivered      int
			Held             int
		}
		ApprovalService bool `json:"approval_service"`
	}
	held := func() int {
		for _, tool := range fleet.Tools {
			if tool.Tool == "transfer_funds" {
				return tool.Held
			}
		}
		return -1
	}
	fleettest.WaitFor(t, 30*time.Second, "status --json shows the held call", func() bool {
		r := cliRun(t, bin, cmdEnv, "status", "--json")
		if r.code != 0 {
			t.Fatalf("status --json: %s", r)
		}
		if err := json.Unmarshal([]byte(r.stdout), &fleet); err != nil {
			t.Fatalf("status --json: %v\n%s", err, r)
		}
		return held() == 1
	})
	if !fleet.ApprovalService || len(fleet.Tools) != 5 {
		t.Errorf("fleet %+v: want 5 tools (the demo tools) and an approval service", fleet)
	}
	for _, tool := range fleet.Tools {
		if len(tool.LiveWorkers) != 1 || tool.LiveWorkers[0] != "dev-worker" || tool.Queued != 0 || tool.InFlight != 0 {
			t.Errorf("tool %+v: want dev-worker live, nothing queued or in flight", tool)
		}
	}

	r := cliRun(t, bin, cmdEnv, "status")
	if r.code != 0 || !cliHasLine(r.stdout, "TOOL", "IN FLIGHT") || !cliHasLine(r.stdout, "transfer_funds", " 1") || !cliHasLine(r.stdout, "add", " 1 ") {
		t.Errorf("status: %s; want the table with add's worker and transfer_funds' held call", r)
	}

	// --watch refreshes until interrupted.
	var out bytes.Buffer
	watch := exec.Command(bin, "status", "--watch", "--interval", "100ms")
	watch.Env, watch.Stdout, watch.Stderr = cmdEnv, &cliBuffer{}, &out
	stdout := watch.Stdout.(*cliBuffer)
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, 30*time.Second, "status --watch refreshed twice", func() bool { return strings.Count(stdout.String(), "TOOL") >= 2 })
	_ = watch.Process.Signal(os.Interrupt)
	if err := watch.Wait(); err != nil {
		t.Errorf("status --watch after SIGINT: %v (want exit 0)\n%s", err, out.String())
	}
	if strings.Contains(stdout.String(), "\033[") {
		t.Errorf("status --watch into a pipe wrote terminal escapes: %q", stdout.String())
	}

	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("scrape dev's /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics is not the Prometheus text format: %v", err)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"windlass_worker_calls_total", map[string]string{"tool": "add", "outcome": "ok"}, 2}, // the self-check and ours
		{"windlass_dispatcher_calls_total", map[string]string{"tool": "add", "outcome": "ok"}, 1},
		{"windlass_worker_queue_wait_seconds", map[string]string{"tool": "add"}, 2},
		{"windlass_registry_live_workers", map[string]string{"tool": "add"}, 1},
		{"windlass_approval_held", nil, 1},
	} {
		v, ok := promValue(families, c.name, c.labels)
		if !ok || v < c.min {
			t.Errorf("%s%v = %v (found %v), want at least %v", c.name, c.labels, v, ok, c.min)
		}
	}
}
