package integration_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/bench"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/limits"
)

// BenchmarkWorkerMemory measures the resident memory of one worker process
// (`windlass bench --serve`, a separate process like any deployed worker)
// holding 10,000 sleeping calls in flight: every call delivered, started
// and kept alive by its heartbeat. It reports the worker's VmRSS when idle
// and with the calls in flight, and its peak (VmHWM), from
// /proc/<pid>/status. One measurement per run, whatever b.N; the target
// (under 200 MB) is read off the figure, not asserted.
//
//	go test -run '^$' -bench WorkerMemory -benchtime 1x ./integration/
func BenchmarkWorkerMemory(b *testing.B) {
	const calls = 10_000
	f := newFleet(b)
	bin := benchBuild(b)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, bin, "bench", "--serve", "--nats-url", f.NATS.URL(), "--redis-url", f.Redis.URL(), "--concurrency", strconv.Itoa(calls))
	cmd.Env = cliEnv(filepath.Join(b.TempDir(), "dev.json"))
	out := &cliBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	fleettest.WaitFor(b, 30*time.Second, "bench worker serving", func() bool { return strings.Contains(out.String(), "serving") })
	// 10,000 calls of one key in flight: past the default caps on purpose.
	d := f.Dispatcher(dispatcher.Config{Limits: limits.Unlimited()})
	fleettest.WaitFor(b, 10*time.Second, "bench_sleep live", func() bool {
		cat, _ := d.Catalog(ctx)
		return len(cat) == 2
	})
	idle := procStatus(b, cmd.Process.Pid)

	// Submit the calls: each sleeps far longer than the measurement.
	args := bench.Arguments(bench.SleepTool, 128, 10*time.Minute)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for range 64 {
		wg.Go(func() {
			for next.Add(1) <= calls {
				if _, err := d.Submit(ctx, bench.SleepTool, args, dispatcher.WithTimeout(time.Hour)); err != nil {
					failed.Store(err)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("submit: %v", err)
	}
	submitted := time.Since(start)

	// In flight: the worker pulls only as many calls as it has free slots,
	// so every delivered, unacknowledged call is one running.
	js, err := jetstream.New(f.Conn())
	if err != nil {
		b.Fatal(err)
	}
	cons, err := js.Consumer(ctx, layout.CallsStream, layout.ConsumerName(bench.SleepTool))
	if err != nil {
		b.Fatal(err)
	}
	var pending int
	b.Cleanup(func() {
		if b.Failed() {
			b.Logf("in flight: %d; worker output:\n%s", pending, out.String())
		}
	})
	took := fleettest.WaitFor(b, 3*time.Minute, fmt.Sprintf("%d calls in flight in the worker", calls), func() bool {
		info, err := cons.Info(ctx)
		if err == nil {
			pending = info.NumAckPending
		}
		return pending == calls
	})
	// Read after the first round of keep-alives (in-progress acks and
	// cancellation checks, due every ack wait / 3 = 10 s): the peak then
	// includes the beats' own goroutines.
	time.Sleep(12 * time.Second)
	held := procStatus(b, cmd.Process.Pid)
	if info, err := cons.Info(ctx); err != nil || info.NumAckPending != calls {
		b.Fatalf("calls in flight after the heartbeats: %v (%v); want %d", info, err, calls)
	}
	b.ReportMetric(float64(calls), "calls-in-flight")
	b.ReportMetric(idle["VmRSS"]/1024, "idle-rss-MB")
	b.ReportMetric(held["VmRSS"]/1024, "rss-MB")
	b.ReportMetric(held["VmHWM"]/1024, "peak-rss-MB")
	b.ReportMetric((held["VmRSS"]-idle["VmRSS"])*1024/calls, "bytes/call")
	b.ReportMetric(held["Threads"], "threads")
	b.Logf("submitted %d calls in %s; all in flight %s later; worker VmRSS idle %.1f MB, holding them %.1f MB (peak %.1f MB)",
		calls, submitted.Round(time.Millisecond), took.Round(time.Millisecond), idle["VmRSS"]/1024, held["VmRSS"]/1024, held["VmHWM"]/1024)
}

// procStatus reads the numeric fields of /proc/<pid>/status (kB for the
// memory ones).
func procStatus(tb testing.TB, pid int) map[string]float64 {
	tb.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatalf("read the worker's memory: %v", err)
	}
	defer f.Close()
	out := map[string]float64{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		if n, err := strconv.ParseFloat(fields[0], 64); err == nil {
			out[k] = n
		}
	}
	return out
}

// benchBuild builds cmd/windlass for a benchmark.
func benchBuild(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "windlass")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/windlass-dev/windlass/cmd/windlass")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build ./cmd/windlass: %v\n%s", err, out)
	}
	return bin
}
