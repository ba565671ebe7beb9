package integration_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
)

// The large-result memory benchmark runs the worker and the dispatcher each
// in a process of its own (the test binary started again with these
// variables set, see TestMain), so that each measures its own heap, apart
// from the other's and from the in-process NATS server's.
const (
	largeWorkerEnv     = "WINDLASS_LARGE_WORKER"     // the worker's id
	largeDispatcherEnv = "WINDLASS_LARGE_DISPATCHER" // the number of calls to make
	largeNATSEnv       = "WINDLASS_LARGE_NATS_URL"
	largeRedisEnv      = "WINDLASS_LARGE_REDIS_ADDR"
	largeSizeEnv       = "WINDLASS_LARGE_SIZE"    // bytes of the result
	largeProfileEnv    = "WINDLASS_LARGE_PROFILE" // a file to write the process's allocation profile to, at the end
	largeMemoryTool    = "large_memory"           // the worker's report of its last large call
)

// heapReport is one process's memory during one large call, in bytes.
type heapReport struct {
	// Peak is the largest heap in use (live objects and dead ones not yet
	// swept: /memory/classes/heap/objects:bytes) sampled every
	// 250 µs during the call, above the heap after a GC at its start.
	Peak int64 `json:"peak"`
	// LivePeak is the largest live heap a GC marked during the call
	// (/gc/heap/live:bytes), above the same baseline: a lower bound of
	// what was reachable at once.
	LivePeak int64 `json:"live_peak"`
	// Allocs is the bytes allocated during the call.
	Allocs int64 `json:"allocs"`
	// HWM is the peak resident set (VmHWM, reset at the call's start
	// through /proc/self/clear_refs) above the resident set then.
	HWM int64 `json:"hwm"`
	// Held is the heap after a GC once the call is over (the dispatcher:
	// while the caller still holds the result), above the baseline.
	Held int64 `json:"held"`
}

// heapWatch samples the process's heap and keeps the peaks of a window.
type heapWatch struct {
	mu                   sync.Mutex
	open                 bool
	base, peak, livePeak uint64
	allocBase            uint64
	rssBase              int64
	samples              []metrics.Sample
	stop                 chan struct{}
	done                 chan struct{}
}

func newHeapWatch() *heapWatch {
	h := &heapWatch{stop: make(chan struct{}), done: make(chan struct{}), samples: []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/allocs:bytes"},
	}}
	go h.run()
	return h
}

func (h *heapWatch) run() {
	defer close(h.done)
	t := time.NewTicker(250 * time.Microsecond)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			h.sample()
		}
	}
}

// read returns the heap in use, the live heap and the bytes allocated.
// h.mu held.
func (h *heapWatch) read() (objects, live, allocs uint64) {
	metrics.Read(h.samples)
	return h.samples[0].Value.Uint64(), h.samples[1].Value.Uint64(), h.samples[2].Value.Uint64()
}

func (h *heapWatch) sample() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.open {
		return
	}
	objects, live, _ := h.read()
	h.peak, h.livePeak = max(h.peak, objects), max(h.livePeak, live)
}

// start opens a window: a GC, then the baseline.
func (h *heapWatch) start() {
	runtime.GC()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.base, _, h.allocBase = h.read()
	h.peak, h.livePeak, h.open = h.base, h.base, true
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // VmHWM := VmRSS
	h.rssBase = procSelf("VmRSS")
}

// end closes the window and reports it; held is measured after a GC.
func (h *heapWatch) end() heapReport {
	h.sample()
	h.mu.Lock()
	h.open = false
	_, _, allocs := h.read()
	r := heapReport{Peak: int64(h.peak - h.base), LivePeak: int64(h.livePeak) - int64(h.base),
		Allocs: int64(allocs - h.allocBase), HWM: procSelf("VmHWM") - h.rssBase}
	h.mu.Unlock()
	runtime.GC()
	h.mu.Lock()
	objects, _, _ := h.read()
	h.mu.Unlock()
	r.Held = int64(objects) - int64(h.base)
	return r
}

func (h *heapWatch) close() { close(h.stop); <-h.done }

// procSelf is a memory field of /proc/self/status, in bytes.
func procSelf(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && k == field {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	return 0
}

// writeAllocs writes the process's allocation profile to the file
// largeProfileEnv names, if any.
func writeAllocs() error {
	path := os.Getenv(largeProfileEnv)
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("allocs").WriteTo(f, 0)
}

// runLargeWorker is the worker process's main: it serves large_string,
// whose result is a prebuilt text of the size asked for (built before the
// baseline, so the baseline holds it: one copy), and large_memory, which
// reports the worker's heap during the last large_string call, from the
// call's start to the report (the result's encoding, its upload and its
// message). It returns the exit code.
func runLargeWorker() int {
	id := os.Getenv(largeWorkerEnv)
	size, err := strconv.Atoi(os.Getenv(largeSizeEnv))
	if err != nil {
		return exitCode("large worker", id, err)
	}
	text := largeText(size)
	h := newHeapWatch()
	defer h.close()
	tools := []windlass.Tool{
		windlass.MustFunc(largeStringTool, func(ctx context.Context, in largeArgs) (string, error) {
			if in.Size != len(text) {
				return "", fmt.Errorf("no prebuilt text of %d bytes", in.Size)
			}
			h.start()
			return text, nil
		}, windlass.WithTimeout(time.Minute)),
		windlass.MustFunc(largeMemoryTool, func(ctx context.Context, _ struct{}) (heapReport, error) {
			r := h.end()
			return r, writeAllocs()
		}),
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	_, err = runWorkerProcess(os.Getenv(largeNATSEnv), os.Getenv(largeRedisEnv), fleetTTL,
		worker.Config{ID: id, ShutdownGrace: 5 * time.Second, Logger: log}, tools...)
	return exitCode("large worker", id, err)
}

// largeMeasurement is one large call's reports, one line of the
// dispatcher process's output.
type largeMeasurement struct {
	Worker     heapReport `json:"worker"`
	Dispatcher heapReport `json:"dispatcher"`
	Seconds    float64    `json:"seconds"`
}

// runLargeDispatcher is the dispatcher process's main: it makes the
// number of large_string calls its variable says, one at a time, each
// measured from a GC before Call to a GC after it, the result still held,
// and writes each call's measurement and the worker's (large_memory) as a
// JSON line on stdout. It returns the exit code.
func runLargeDispatcher() int {
	calls, err := strconv.Atoi(os.Getenv(largeDispatcherEnv))
	if err != nil {
		return exitCode("large dispatcher", "", err)
	}
	size, err := strconv.Atoi(os.Getenv(largeSizeEnv))
	if err != nil {
		return exitCode("large dispatcher", "", err)
	}
	ctx := context.Background()
	nc, err := nats.Connect(os.Getenv(largeNATSEnv))
	if err != nil {
		return exitCode("large dispatcher", "", err)
	}
	defer nc.Close()
	rc := redis.NewClient(&redis.Options{Addr: os.Getenv(largeRedisEnv)})
	defer rc.Close()
	reg, err := registry.New(registry.Config{Client: rc, TTL: fleetTTL})
	if err != nil {
		return exitCode("large dispatcher", "", err)
	}
	d, err := dispatcher.New(ctx, dispatcher.Config{Conn: nc, Registry: reg})
	if err != nil {
		return exitCode("large dispatcher", "", err)
	}
	defer d.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if cat, _ := d.Catalog(ctx); len(cat) == 2 {
			break
		}
		if time.Now().After(deadline) {
			return exitCode("large dispatcher", "", fmt.Errorf("the catalog does not list the worker's tools"))
		}
	}
	h := newHeapWatch()
	defer h.close()
	out := json.NewEncoder(os.Stdout)
	for range calls {
		var m largeMeasurement
		h.start()
		began := time.Now()
		r, err := d.Call(ctx, largeStringTool, largeArgs{Size: size}, dispatcher.WithTimeout(2*time.Minute))
		m.Seconds = time.Since(began).Seconds()
		m.Dispatcher = h.end()
		switch {
		case err != nil:
			return exitCode("large dispatcher", "", err)
		case r.IsError || len(r.Content) != size:
			return exitCode("large dispatcher", "", fmt.Errorf("%s: %.200s (%d bytes)", r.Code(), r.Content, len(r.Content)))
		}
		runtime.KeepAlive(r)
		r = windlass.ToolResult{}
		rep, err := d.Call(ctx, largeMemoryTool, struct{}{})
		if err == nil && rep.IsError {
			err = fmt.Errorf("%s", rep.Content)
		}
		if err == nil {
			err = rep.Decode(&m.Worker)
		}
		if err != nil {
			return exitCode("large dispatcher", "", fmt.Errorf("the worker's report: %w", err))
		}
		if err := out.Encode(m); err != nil {
			return exitCode("large dispatcher", "", err)
		}
	}
	return exitCode("large dispatcher", "", writeAllocs())
}

// BenchmarkLargeResultMemory measures what holding a 50 MiB result takes
// in each process: the worker's (its tool returns a prebuilt 50 MiB
// string, which the worker encodes and uploads) and the dispatcher's
// (Call fetches it and returns it), each a process of its own, sampling
// its own heap. Three calls, one at a time, in one dispatcher process
// (the first is a fresh process's); for each process the largest of the
// three is reported, in multiples of the result's size: the peak heap in
// use above a GC'd baseline taken as the call starts (in the worker, the
// baseline already holds the tool's string), the largest live heap a GC
// marked, the bytes allocated, the peak RSS, and what the dispatcher
// still holds after a GC while the caller holds the result. One
// measurement per run, whatever b.N.
//
//	go test -run '^$' -bench 'LargeResultMemory' -benchtime 1x -count 3 ./integration/
//
// With WINDLASS_LARGE_PROFILE_DIR set, each process writes its allocation
// profile there (worker.allocs, dispatcher.allocs) for
// `go tool pprof -sample_index=alloc_space`.
func BenchmarkLargeResultMemory(b *testing.B) {
	const size, calls = 50 << 20, 3
	f := newFleet(b)
	bin, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	profiles := os.Getenv("WINDLASS_LARGE_PROFILE_DIR")
	env := func(role string, kv ...string) []string {
		e := append(os.Environ(), largeNATSEnv+"="+f.NATS.URL(), largeRedisEnv+"="+f.Redis.Addr(), largeSizeEnv+"="+strconv.Itoa(size))
		if profiles != "" {
			e = append(e, largeProfileEnv+"="+filepath.Join(profiles, role+".allocs"))
		}
		return append(e, kv...)
	}
	var wlog cliBuffer
	w := exec.Command(bin, "-test.run=^$")
	w.Env = env("worker", largeWorkerEnv+"=lw1")
	w.Stdout, w.Stderr = &wlog, &wlog
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = w.Wait(); close(exited) }()
	b.Cleanup(func() {
		_ = w.Process.Signal(os.Interrupt)
		<-exited
		if b.Failed() {
			b.Logf("worker output:\n%s", wlog.String())
		}
	})
	fleettest.WaitFor(b, 30*time.Second, "the large worker advertised", func() bool {
		select {
		case <-exited:
			b.Fatalf("the worker process exited at start:\n%s", wlog.String())
		default:
		}
		info, err := f.Registry().Lookup(context.Background(), largeMemoryTool)
		return err == nil && slices.Contains(info.LiveWorkers(time.Now()), "lw1")
	})

	dcmd := exec.Command(bin, "-test.run=^$")
	dcmd.Env = env("dispatcher", largeDispatcherEnv+"="+strconv.Itoa(calls))
	var dlog cliBuffer
	dcmd.Stderr = &dlog
	outb, err := dcmd.Output()
	if err != nil {
		b.Fatalf("dispatcher process: %v\n%s", err, dlog.String())
	}
	var ms []largeMeasurement
	s := bufio.NewScanner(strings.NewReader(string(outb)))
	for s.Scan() {
		var m largeMeasurement
		if err := json.Unmarshal(s.Bytes(), &m); err != nil {
			continue // not a measurement (the test binary's own output)
		}
		ms = append(ms, m)
	}
	if len(ms) != calls {
		b.Fatalf("%d measurements, want %d:\n%s", len(ms), calls, outb)
	}
	x := func(n int64) float64 { return float64(n) / size }
	most := func(pick func(largeMeasurement) int64) float64 {
		var m int64
		for _, v := range ms {
			m = max(m, pick(v))
		}
		return x(m)
	}
	for i, m := range ms {
		b.Logf("call %d (%.2fs): worker peak %.2f× (live %.2f×, allocated %.2f×, RSS %.2f×, held after %.2f×); dispatcher peak %.2f× (live %.2f×, allocated %.2f×, RSS %.2f×, held with the result %.2f×)",
			i+1, m.Seconds, x(m.Worker.Peak), x(m.Worker.LivePeak), x(m.Worker.Allocs), x(m.Worker.HWM), x(m.Worker.Held),
			x(m.Dispatcher.Peak), x(m.Dispatcher.LivePeak), x(m.Dispatcher.Allocs), x(m.Dispatcher.HWM), x(m.Dispatcher.Held))
	}
	b.ReportMetric(most(func(m largeMeasurement) int64 { return m.Worker.Peak }), "worker-peak-x")
	b.ReportMetric(most(func(m largeMeasurement) int64 { return m.Worker.LivePeak }), "worker-live-x")
	b.ReportMetric(most(func(m largeMeasurement) int64 { return m.Worker.Allocs }), "worker-alloc-x")
	b.ReportMetric(most(func(m largeMeasurement) int64 { return m.Worker.HWM }), "worker-rss-x")
	b.ReportMetric(most(func(m largeMeasurement) int64 { return m.Dispatcher.Peak }), "dispatcher-peak-x")
	b.ReportMetric(most(func(m largeMeasurement) int64 { return m.Dispatcher.LivePeak }), "dispatcher-live-x")
	b.ReportMetric(most(func(m largeMeasurement) int64 { return m.Dispatcher.Allocs }), "dispatcher-alloc-x")
	b.ReportMetric(most(func(m largeMeasurement) int64 { return m.Dispatcher.HWM }), "dispatcher-rss-x")
	b.ReportMetric(most(func(m largeMeasurement) int64 { return m.Dispatcher.Held }), "dispatcher-held-x")
}
