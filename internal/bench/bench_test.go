package bench

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPercentiles(t *testing.T) {
	lat := make([]time.Duration, 1000)
	for i := range lat {
		lat[i] = time.Duration(1000-i) * time.Microsecond // 1..1000 µs, reversed
	}
	s := summarize(lat, 2, errors.New("boom"), time.Second)
	if s.Calls != 1000 || s.Errors != 2 || s.FirstError != "boom" || s.PerSec != 1000 {
		t.Errorf("stats = %+v", s)
	}
	for _, tc := range []struct {
		name      string
		got, want float64
	}{{"p50", s.P50, 500}, {"p90", s.P90, 900}, {"p99", s.P99, 990}, {"p99.9", s.P999, 999}} {
		if tc.got != tc.want {
			t.Errorf("%s = %v µs, want %v", tc.name, tc.got, tc.want)
		}
	}
	if empty := summarize(nil, 0, nil, 0); empty.P50 != 0 || empty.PerSec != 0 {
		t.Errorf("no samples: %+v", empty)
	}
}

func TestRatios(t *testing.T) {
	r := ratios(Stats{PerSec: 50, P50: 300, P99: 900}, Stats{PerSec: 100, P50: 200, P99: 0})
	if r.Throughput != 0.5 || r.P50 != 1.5 || r.P99 != 0 {
		t.Errorf("ratios = %+v, want 0.5, 1.5 and 0 for a zero baseline", r)
	}
}

func TestScenarios(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		want    []string
		wantErr bool
	}{
		{"defaults", Config{}, []string{"bench_noop 128B closed/1", "bench_noop 128B closed/8", "bench_noop 128B closed/64", "bench_noop 128B closed/512"}, false},
		{"open only", Config{Rates: []float64{500}, Payloads: []int{1024}, Tools: []string{SleepTool}}, []string{"bench_sleep 1024B open/500/s"}, false},
		{"both", Config{InFlight: []int{2}, Rates: []float64{10}}, []string{"bench_noop 128B closed/2", "bench_noop 128B open/10/s"}, false},
		{"zero in flight", Config{InFlight: []int{0}}, nil, true},
		{"unknown tool", Config{Tools: []string{"echo"}}, nil, true},
		{"negative rate", Config{Rates: []float64{-1}}, nil, true},
		{"huge payload", Config{Payloads: []int{1 << 20}}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); (err != nil) != tc.wantErr {
				t.Fatalf("Validate = %v, wantErr %t", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			var got []string
			for _, sc := range tc.cfg.Scenarios() {
				got = append(got, sc.Name())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("scenarios = %q, want %q", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("scenario %d = %q, want %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestArguments(t *testing.T) {
	for _, size := range []int{0, 128, 1024, 8192} {
		for _, tool := range []string{NoopTool, SleepTool} {
			b := Arguments(tool, size, 100*time.Millisecond)
			var v struct {
				Data string   `json:"data"`
				MS   *float64 `json:"ms"`
			}
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatalf("%s %d B: %s: %v", tool, size, b, err)
			}
			if size >= 64 && (len(b) < size-2 || len(b) > size+2) {
				t.Errorf("%s %d B: encoded in %d bytes", tool, size, len(b))
			}
			if (tool == SleepTool) != (v.MS != nil) || v.MS != nil && *v.MS != 100 {
				t.Errorf("%s: ms = %v", tool, v.MS)
			}
		}
	}
}

// TestMeasureCounts checks the loops' bookkeeping, not their timing: every
// call is made once and counted, failures included.
func TestMeasureCounts(t *testing.T) {
	for _, load := range []Load{{InFlight: 4, Calls: 101}, {Rate: 100_000, Calls: 101}} {
		var made atomic.Int64
		s := Measure(context.Background(), load, func(context.Context) error {
			if made.Add(1)%10 == 0 {
				return errors.New("every tenth fails")
			}
			return nil
		}, nil)
		if n := made.Load(); n != 101 || s.Calls != 101 || s.Errors != 10 {
			t.Errorf("load %+v: made %d calls, stats %+v; want 101 calls, 10 failed", load, n, s)
		}
	}
}
