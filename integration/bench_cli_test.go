package integration_test

import (
	"encoding/json"
	"testing"
)

// TestCLIBench runs a tiny `windlass bench` on its embedded servers and
// checks the JSON report's shape: every scenario asked for, each path
// measured without failures, and the fleet's ratios to both baselines
// computed. It asserts no speed: figures come from real runs (BENCHMARKS.md).
func TestCLIBench(t *testing.T) {
	t.Parallel()
	bin := cliBuild(t)
	r := cliRun(t, bin, cliEnv(t.TempDir()+"/dev.json"), "bench", "--calls", "200", "--inflight", "1,8", "--json")
	if r.code != 0 {
		t.Fatalf("windlass bench: %s", r)
	}
	var rep struct {
		Machine struct {
			CPUs int    `json:"cpus"`
			Go   string `json:"go"`
			NATS string `json:"nats_server"`
		} `json:"machine"`
		Scenarios []struct {
			Name        string             `json:"name"`
			Tool        string             `json:"tool"`
			Mode        string             `json:"mode"`
			InFlight    int                `json:"inflight"`
			Payload     int                `json:"payload_bytes"`
			VsJetStream map[string]float64 `json:"vs_raw_jetstream"`
			VsRequest   map[string]float64 `json:"vs_raw_request"`
			VsStored    map[string]float64 `json:"vs_raw_jetstream_stored"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("bench --json output is not a report: %v\n%s", err, r)
	}
	var raw struct {
		Scenarios []map[string]json.RawMessage `json:"scenarios"`
	}
	_ = json.Unmarshal([]byte(r.stdout), &raw)
	if rep.Machine.CPUs < 1 || rep.Machine.Go == "" || rep.Machine.NATS == "" {
		t.Errorf("machine = %+v; want CPUs, Go and NATS versions", rep.Machine)
	}
	if len(rep.Scenarios) != 2 || len(raw.Scenarios) != 2 {
		t.Fatalf("got %d scenarios; want 2 (closed loops at 1 and 8)\n%s", len(rep.Scenarios), r.stdout)
	}
	for i, sc := range rep.Scenarios {
		want := []int{1, 8}[i]
		if sc.Mode != "closed" || sc.InFlight != want || sc.Tool != "bench_noop" || sc.Payload != 128 {
			t.Errorf("scenario %d = %s (%s, %d in flight, %s, %d B); want closed, %d in flight, bench_noop, 128 B", i, sc.Name, sc.Mode, sc.InFlight, sc.Tool, sc.Payload, want)
		}
		for _, path := range []string{"fleet", "raw_jetstream", "raw_request", "raw_jetstream_stored"} {
			var s struct {
				Calls  int     `json:"calls"`
				Errors int     `json:"errors"`
				PerSec float64 `json:"calls_per_sec"`
				P50    float64 `json:"p50_us"`
				P90    float64 `json:"p90_us"`
				P99    float64 `json:"p99_us"`
				P999   float64 `json:"p99_9_us"`
			}
			if err := json.Unmarshal(raw.Scenarios[i][path], &s); err != nil {
				t.Fatalf("%s: %s: %v", sc.Name, path, err)
			}
			if s.Calls != 200 || s.Errors != 0 || s.PerSec <= 0 || s.P50 <= 0 || s.P50 > s.P90 || s.P90 > s.P99 || s.P99 > s.P999 {
				t.Errorf("%s: %s = %+v; want 200 calls, no errors, a rate and ordered percentiles", sc.Name, path, s)
			}
		}
		for name, ratios := range map[string]map[string]float64{"vs_raw_jetstream": sc.VsJetStream, "vs_raw_request": sc.VsRequest, "vs_raw_jetstream_stored": sc.VsStored} {
			for _, k := range []string{"throughput", "p50", "p99"} {
				if ratios[k] <= 0 {
					t.Errorf("%s: %s.%s = %v; want a computed ratio", sc.Name, name, k, ratios[k])
				}
			}
		}
	}
}
