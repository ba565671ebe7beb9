package bench

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
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

func TestMeasureInterleaved(t *testing.T) {
	for _, load := range []Load{{InFlight: 4, Calls: 101}, {InFlight: 64, Calls: 1}, {InFlight: 1, Calls: 1000}} {
		var made [3]atomic.Int64
		var order []int // the path of each call, in a single-caller load
		paths := make([]CallFunc, len(made))
		for i := range paths {
			paths[i] = func(context.Context) error {
				if made[i].Add(1)%10 == 0 {
					return errors.New("every tenth fails")
				}
				if load.InFlight == 1 && (len(order) == 0 || order[len(order)-1] != i) {
					order = append(order, i)
				}
				return nil
			}
		}
		stats := MeasureInterleaved(context.Background(), load, paths)
		for i, s := range stats {
			if n := made[i].Load(); n != int64(load.Calls) || s.Calls != load.Calls || s.Errors != load.Calls/10 {
				t.Errorf("load %+v, path %d: made %d calls, stats %+v; want %d calls, %d failed", load, i, n, s, load.Calls, load.Calls/10)
			}
		}
		if load.InFlight == 1 { // 10 rounds: 0 1 2, 2 1 0, … (consecutive calls of one path count once)
			want := []int{0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 2, 1, 0}
			if !slices.Equal(order, want) {
				t.Errorf("load %+v: paths called in order %v, want %v", load, order, want)
			}
		}
	}
}

// TestStartFailsCleanly: a Start that fails part way (here on a Redis URL
// that does not parse, after the embedded NATS started) returns the error
// and closes what it started; it used to close a nil Env and panic.
func TestStartFailsCleanly(t *testing.T) {
	e, err := Start(t.Context(), Options{RedisURL: "redis://127.0.0.1:1?bogus=1"})
	if e != nil || err == nil || !strings.Contains(err.Error(), "unexpected option: bogus") {
		t.Fatalf("Start with a bad Redis URL = %v, %v; want nil and the URL's error", e, err)
	}
}
