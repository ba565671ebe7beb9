package integration_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/internal/bench"
	"github.com/windlass-dev/windlass/limits"
)

// startBench starts the benchmarks' fleet (internal/bench: embedded NATS, a
// redis-server, a worker of the bench tools, a dispatcher and the raw
// responders) for the whole benchmark.
func startBench(b *testing.B) *bench.Env {
	b.Helper()
	env, err := bench.Start(context.Background(), benchOptions())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(env.Close)
	return env
}

// BenchmarkRoundTrip measures Call of a no-op tool through the fleet beside
// a raw JetStream round trip, core NATS request/reply, and the raw JetStream
// round trip storing the three messages the fleet stores (call, queued
// record, answer), on the same server in the same run: each iteration is
// one call of each, so calls/s, p50 and p99 are reported, with the fleet's
// ratios to raw JetStream (the figures the README quotes), and its
// throughput and p50 ratios to the stored round trip (the cost of the
// fleet's own code). The code is
// internal/bench's, the same as `windlass bench`'s. "fleet" is a
// dispatcher configured with nothing: the default admission limits
// (package limits), one Redis round trip a call.
//
// At 64 and 512 in flight it measures the admission limits' cost too
// (issue 20): the fleet through three more dispatchers, interleaved
// (bench.MeasureInterleaved), with no limits (limits.Unlimited(),
// "limits-none"), the defaults ("limits-default", the caps alone) and a
// per-key rate of a million a second over the default caps
// ("limits-rate+caps": two Redis round trips a call, never refused), and
// each one's throughput ratio to "limits-none".
//
//	go test -run '^$' -bench RoundTrip -benchtime 5000x -count 5 ./integration/
func BenchmarkRoundTrip(b *testing.B) {
	env := startBench(b)
	var limited []bench.CallFunc // none, default, rate+caps; opened at the first load that measures them
	for _, inflight := range []int{1, 8, 64, 512} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			ctx := context.Background()
			paths := []bench.CallFunc{env.RawJetStream(0, 0), env.RawRequest(0, 0), env.RawStored(0, 0), env.Fleet(bench.NoopTool, 0, 0)}
			withLimits := inflight >= 64
			if withLimits && limited == nil {
				for _, lim := range limitConfigs {
					call, err := env.FleetLimited(ctx, lim.cfg, bench.NoopTool, 0, 0)
					if err != nil {
						b.Fatal(err)
					}
					limited = append(limited, call)
				}
			}
			warm := paths
			if withLimits {
				warm = append(warm[:len(warm):len(warm)], limited...)
			}
			for _, call := range warm { // connections, consumers, caches
				bench.Measure(ctx, bench.Load{InFlight: inflight, Calls: 200}, call, nil)
			}
			b.ResetTimer()
			var stats [4]bench.Stats
			for i, call := range paths {
				if stats[i] = bench.Measure(ctx, bench.Load{InFlight: inflight, Calls: b.N}, call, nil); stats[i].Errors > 0 {
					b.Fatalf("%d calls failed: %s", stats[i].Errors, stats[i].FirstError)
				}
			}
			var lstats []bench.Stats
			if withLimits {
				lstats = bench.MeasureInterleaved(ctx, bench.Load{InFlight: inflight, Calls: b.N}, limited)
				for i, s := range lstats {
					if s.Errors > 0 {
						b.Fatalf("limits=%s: %d calls failed: %s", limitConfigs[i].name, s.Errors, s.FirstError)
					}
				}
			}
			b.StopTimer()
			raw, req, stored, fleet := stats[0], stats[1], stats[2], stats[3]
			b.ReportMetric(raw.PerSec, "raw-calls/s")
			b.ReportMetric(req.PerSec, "req-calls/s")
			b.ReportMetric(fleet.PerSec, "fleet-calls/s")
			b.ReportMetric(fleet.PerSec/raw.PerSec, "throughput-ratio")
			b.ReportMetric(stored.PerSec, "stored-calls/s")
			b.ReportMetric(fleet.PerSec/stored.PerSec, "stored-throughput-ratio")
			b.ReportMetric(fleet.P50/stored.P50, "stored-p50-ratio")
			b.ReportMetric(raw.P50, "raw-p50-µs")
			b.ReportMetric(req.P50, "req-p50-µs")
			b.ReportMetric(fleet.P50, "fleet-p50-µs")
			b.ReportMetric(fleet.P50/raw.P50, "p50-ratio")
			b.ReportMetric(raw.P99, "raw-p99-µs")
			b.ReportMetric(fleet.P99, "fleet-p99-µs")
			b.ReportMetric(fleet.P99/raw.P99, "p99-ratio")
			for i, s := range lstats {
				name := limitConfigs[i].name
				b.ReportMetric(s.PerSec, "limits-"+name+"-calls/s")
				b.ReportMetric(s.P50, "limits-"+name+"-p50-µs")
				if i > 0 {
					b.ReportMetric(s.PerSec/lstats[0].PerSec, "limits-"+name+"-ratio")
				}
			}
		})
	}
}

// limitConfigs are the admission limits BenchmarkRoundTrip compares, the
// first ("none") the base of the others' ratios.
var limitConfigs = []struct {
	name string
	cfg  limits.Config
}{
	{"none", limits.Unlimited()},
	{"default", limits.Config{}},
	// A rate checked on every call and never refusing one, over the
	// default caps: the Lua script's round trip and redis_rate's.
	{"rate+caps", limits.Config{Default: limits.Limit{Rate: limits.PerSecond(limits.MaxEvents)}}},
}

// BenchmarkScenarios runs internal/bench's scenarios — both tools, the three
// payloads, closed loops at 1, 8, 64 and 512 in flight and open loops at
// 1,000 and 4,000 calls/s — and reports each scenario's fleet figures and
// ratios. b.N is the calls of each path in each scenario.
//
//	go test -run '^$' -bench Scenarios -benchtime 2000x ./integration/
func BenchmarkScenarios(b *testing.B) {
	env := startBench(b)
	cfg := bench.Config{InFlight: []int{1, 8, 64, 512}, Rates: []float64{1000, 4000}, Payloads: []int{128, 1024, 8192}, Tools: []string{bench.NoopTool, bench.SleepTool}}
	for _, sc := range cfg.Scenarios() {
		b.Run(sc.Name(), func(b *testing.B) {
			one := cfg
			one.Tools, one.Payloads, one.InFlight, one.Rates = []string{sc.Tool}, []int{sc.Payload}, nil, nil
			if sc.Mode == "open" {
				one.Rates = []float64{sc.Rate}
				one.InFlight = []int{}
			} else {
				one.InFlight = []int{sc.InFlight}
			}
			one.Calls = b.N
			rep, err := env.Run(context.Background(), one)
			if err != nil {
				b.Fatal(err)
			}
			r := rep.Scenarios[0]
			for _, s := range []bench.Stats{r.Fleet, r.RawJetStream, r.RawRequest, r.RawStored} {
				if s.Errors > 0 {
					b.Fatalf("%d calls failed: %s", s.Errors, s.FirstError)
				}
			}
			b.ReportMetric(r.Fleet.PerSec, "fleet-calls/s")
			b.ReportMetric(r.Fleet.P50, "fleet-p50-µs")
			b.ReportMetric(r.Fleet.P99, "fleet-p99-µs")
			b.ReportMetric(r.VsJetStream.Throughput, "throughput-vs-js")
			b.ReportMetric(r.VsJetStream.P50, "p50-vs-js")
			b.ReportMetric(r.VsRequest.Throughput, "throughput-vs-req")
			b.ReportMetric(r.VsRequest.P50, "p50-vs-req")
			b.ReportMetric(r.VsStored.Throughput, "throughput-vs-stores")
			b.ReportMetric(r.VsStored.P50, "p50-vs-stores")
		})
	}
}

// BenchmarkFleetCall is the fleet's path alone (no baselines), for
// profiling the hot path:
//
//	go test -run '^$' -bench FleetCall/inflight=64 -benchtime 20000x -cpuprofile cpu.out ./integration/
//	go tool pprof -top integration.test cpu.out
func BenchmarkFleetCall(b *testing.B) {
	benchAlone(b, func(env *bench.Env) bench.CallFunc { return env.Fleet(bench.NoopTool, 128, 0) })
}

// BenchmarkFleetCallNoLimits is BenchmarkFleetCall through a dispatcher
// with no admission limits (limits.Unlimited()): beside it, the CPU a call
// that the default caps cost — at 512 in flight one key's calls are past a
// quarter of its cap, so each one asks Redis (package limits, "Admission
// without waiting").
//
//	go test -run '^$' -bench 'FleetCall(NoLimits)?/inflight=512' -benchtime 30000x ./integration/
func BenchmarkFleetCallNoLimits(b *testing.B) {
	benchAlone(b, func(env *bench.Env) bench.CallFunc {
		call, err := env.FleetLimited(context.Background(), limits.Unlimited(), bench.NoopTool, 128, 0)
		if err != nil {
			b.Fatal(err)
		}
		return call
	})
}

// BenchmarkStoredCall is the stored baseline alone (the raw JetStream
// round trip that stores what the fleet stores, see BENCHMARKS.md), the
// side to profile beside BenchmarkFleetCall: their difference per call is
// the fleet's own code.
//
//	go test -run '^$' -bench StoredCall/inflight=64 -benchtime 30000x -cpuprofile stored.out ./integration/
func BenchmarkStoredCall(b *testing.B) {
	benchAlone(b, func(env *bench.Env) bench.CallFunc { return env.RawStored(128, 0) })
}

// BenchmarkStoredCallFleetSized is the stored baseline with messages about
// the fleet's size (BenchmarkFleetCall's in-B/call and out-B/call; the
// fleet's call and result carry the records and headers of PROTOCOL.md):
// calls of 400 bytes, answers of 470. Its CPU a call over
// BenchmarkStoredCall's is what the fleet's larger messages cost; the rest
// of the fleet's over it is the fleet's code.
//
//	go test -run '^$' -bench 'StoredCall|FleetCallNoLimits' -benchtime 30000x ./integration/
func BenchmarkStoredCallFleetSized(b *testing.B) {
	benchAlone(b, func(env *bench.Env) bench.CallFunc { return env.RawStoredSized(400, 470, 0) })
}

// BenchmarkRawCall is the raw JetStream round trip alone (one stored
// message a call), the floor beside BenchmarkStoredCall and
// BenchmarkFleetCall: on a machine whose cores the server, the clients and
// the load share, their CPU a call (cpu-µs/call) bounds their throughput
// ratios.
//
//	go test -run '^$' -bench 'RawCall|StoredCall|FleetCall' -benchtime 30000x ./integration/
func BenchmarkRawCall(b *testing.B) {
	benchAlone(b, func(env *bench.Env) bench.CallFunc { return env.RawJetStream(128, 0) })
}

// benchAlone measures one path alone at 1, 64 and 512 in flight, with its
// allocations and the process's CPU a call (user and system time of this
// process, which runs the NATS server, the clients and the load; not the
// Redis server's, a process of its own that only the fleet's admission
// uses): the call path of BenchmarkFleetCall, BenchmarkStoredCall and
// BenchmarkRawCall.
func benchAlone(b *testing.B, path func(*bench.Env) bench.CallFunc) {
	env := startBench(b)
	for _, inflight := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			call := path(env)
			bench.Measure(context.Background(), bench.Load{InFlight: inflight, Calls: 200}, call, nil)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU(b)
			before, counted := env.ServerTraffic()
			s := bench.Measure(context.Background(), bench.Load{InFlight: inflight, Calls: b.N}, call, nil)
			cpu = processCPU(b) - cpu
			if after, _ := env.ServerTraffic(); counted {
				n := float64(b.N)
				b.ReportMetric(float64(after.InMsgs-before.InMsgs)/n, "in-msgs/call")
				b.ReportMetric(float64(after.OutMsgs-before.OutMsgs)/n, "out-msgs/call")
				b.ReportMetric(float64(after.InBytes-before.InBytes)/n, "in-B/call")
				b.ReportMetric(float64(after.OutBytes-before.OutBytes)/n, "out-B/call")
			}
			if s.Errors > 0 {
				b.Fatalf("%d calls failed: %s", s.Errors, s.FirstError)
			}
			b.ReportMetric(s.PerSec, "calls/s")
			b.ReportMetric(s.P50, "p50-µs")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/call")
		})
	}
}

// processCPU is the CPU time this process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
