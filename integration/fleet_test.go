package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/demotools"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
)

// waitLive waits until d's view shows n live workers of tool.
func waitLive(t *testing.T, d *dispatcher.Dispatcher, tool string, n int) {
	t.Helper()
	fleettest.WaitFor(t, 5*time.Second, fmt.Sprintf("%d live workers of %s", n, tool), func() bool {
		cat, _ := d.Catalog(context.Background())
		for _, e := range cat {
			if e.Spec.Name == tool {
				return len(e.Workers) == n
			}
		}
		return n == 0
	})
}

func TestThousandCallsAcrossThreeWorkers(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	workers := make([]*fleettest.Worker, 3)
	for i := range workers {
		workers[i] = f.StartWorker(worker.Config{ID: fmt.Sprintf("w%d", i)}, demotools.Echo(), demotools.Add())
	}
	d := f.Dispatcher(dispatcher.Config{})
	waitLive(t, d, "echo", 3)
	waitLive(t, d, "add", 3)

	const calls = 1000
	var wrong atomic.Int64
	byWorker := sync.Map{}
	seen := sync.Map{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range calls {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var (
				r    windlass.ToolResult
				err  error
				want string
			)
			if i%2 == 0 {
				r, err = d.Call(t.Context(), "echo", map[string]string{"text": fmt.Sprintf("msg-%d", i)})
				want = fmt.Sprintf("msg-%d", i)
			} else {
				r, err = d.Call(t.Context(), "add", map[string]int{"a": i, "b": 1})
				want = fmt.Sprint(i + 1)
			}
			if err != nil || r.IsError || r.Content != want {
				wrong.Add(1)
				t.Errorf("call %d: %+v, %v (want %q)", i, r, err, want)
				return
			}
			if _, dup := seen.LoadOrStore(r.CallID, true); dup {
				t.Errorf("call id %s answered twice", r.CallID)
			}
			n, _ := byWorker.LoadOrStore(r.Worker, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		})
	}
	wg.Wait()
	total := int64(0)
	byWorker.Range(func(k, v any) bool {
		n := v.(*atomic.Int64).Load()
		total += n
		t.Logf("worker %s answered %d calls", k, n)
		if n < calls/10 {
			t.Errorf("worker %s answered only %d of %d calls: the load is not spread", k, n, calls)
		}
		return true
	})
	if total != calls || wrong.Load() != 0 {
		t.Fatalf("answered %d correctly of %d", total-wrong.Load(), calls)
	}
	// A worker counts a call after publishing its result, so its counters
	// may trail the caller by a moment; they must settle at exactly 1,000.
	completed := func() (n int64) {
		for _, w := range workers {
			n += w.Stats().Completed
		}
		return n
	}
	fleettest.WaitFor(t, 2*time.Second, "workers' counters settle", func() bool { return completed() >= calls })
	if n := completed(); n != calls {
		t.Errorf("workers completed %d executions for %d calls", n, calls)
	}
}

func TestTimeoutReturnsWithinBound(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	ended := make(chan error, 1)
	slow := windlass.MustFunc("slow", func(ctx context.Context, _ struct{}) (string, error) {
		<-ctx.Done()
		ended <- ctx.Err()
		return "", ctx.Err()
	}, windlass.WithTimeout(500*time.Millisecond))
	f.StartWorker(worker.Config{}, slow)
	d := f.Dispatcher(dispatcher.Config{})
	waitLive(t, d, "slow", 1)

	start := time.Now()
	r, err := d.Call(t.Context(), "slow", nil)
	elapsed := time.Since(start)
	if err != nil || r.Code() != windlass.CodeTimeout {
		t.Fatalf("result = %+v, %v; want timeout", r, err)
	}
	if elapsed > 500*time.Millisecond+time.Second {
		t.Errorf("timeout result after %s, want within timeout + 1s", elapsed)
	}
	select {
	case err := <-ended:
		if err != context.DeadlineExceeded {
			t.Errorf("the tool's context ended with %v", err)
		}
	case <-time.After(time.Second):
		t.Error("the tool never saw its context end")
	}

	// A call deadline shorter than the tool's timeout wins.
	start = time.Now()
	r, _ = d.Call(t.Context(), "slow", nil, dispatcher.WithTimeout(200*time.Millisecond))
	if r.Code() != windlass.CodeTimeout || time.Since(start) > 200*time.Millisecond+time.Second {
		t.Errorf("deadline call: %+v after %s", r, time.Since(start))
	}
}

func TestRefusalsBeforePublish(t *testing.T) {
	t.Parallel()
	f := newFleet(t, fleettest.WithNATS(testserver.NATSOptions{MaxPayload: 64 * 1024}))
	f.StartWorker(worker.Config{}, demotools.Echo(), demotools.Add())
	d := f.Dispatcher(dispatcher.Config{PayloadLimit: 80 * 1024})
	waitLive(t, d, "echo", 1)
	// Over the server's max payload, under the dispatcher's limit: by
	// reference, in chunks that fit the server.
	if r, err := d.Call(t.Context(), "echo", map[string]string{"text": strings.Repeat("y", 70*1024)}); err != nil || r.Content != strings.Repeat("y", 70*1024) {
		t.Errorf("a 70 KiB echo through a 64 KiB server: %.100q, %v", r.Content, err)
	}
	// A tool known to the registry whose only worker is gone.
	gone := f.StartWorker(worker.Config{}, windlass.MustFunc("gone", func(ctx context.Context, _ struct{}) (int, error) { return 1, nil }))
	waitLive(t, d, "gone", 1)
	gone.Stop()
	waitLive(t, d, "gone", 0)

	tests := []struct {
		name     string
		tool     string
		args     any
		wantCode windlass.ErrorCode
		wantText string
	}{
		{name: "unknown tool", tool: "nope", args: nil, wantCode: windlass.CodeUnknownTool, wantText: `"nope"`},
		{name: "no worker", tool: "gone", args: nil, wantCode: windlass.CodeNoWorker, wantText: `"gone"`},
		{name: "wrong type", tool: "add", args: map[string]any{"a": "one", "b": 2}, wantCode: windlass.CodeInvalidArguments, wantText: "$.a"},
		{name: "missing field", tool: "add", args: map[string]any{"a": 1}, wantCode: windlass.CodeInvalidArguments, wantText: "$.b"},
		{name: "not an object", tool: "echo", args: json.RawMessage(`[1]`), wantCode: windlass.CodeInvalidArguments, wantText: "object"},
		{name: "oversized payload", tool: "echo", args: map[string]string{"text": strings.Repeat("x", 100*1024)}, wantCode: windlass.CodePayloadTooLarge, wantText: "81920"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := d.Call(t.Context(), tt.tool, tt.args)
			if err != nil || r.Code() != tt.wantCode || !strings.Contains(r.Content, tt.wantText) {
				t.Errorf("Call = %.300q (code %q), %v; want code %s with %q", r.Content, r.Code(), err, tt.wantCode, tt.wantText)
			}
			_, err = d.Submit(t.Context(), tt.tool, tt.args)
			var ce *windlass.CallError
			if !errors.As(err, &ce) || ce.Code != tt.wantCode {
				t.Errorf("Submit error = %v, want a CallError %s", err, tt.wantCode)
			}
		})
	}
	// AllowNoWorker queues the call: a worker started later runs it.
	id, err := d.Submit(t.Context(), "gone", nil, dispatcher.AllowNoWorker(), dispatcher.WithTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f.StartWorker(worker.Config{}, windlass.MustFunc("gone", func(ctx context.Context, _ struct{}) (int, error) { return 1, nil }))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	r, err := d.Wait(ctx, id)
	if err != nil || r.Content != "1" {
		t.Errorf("queued call: %+v, %v", r, err)
	}
}

func TestGracefulStopFinishesRunningCalls(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	started := make(chan struct{}, 8)
	slowEcho := windlass.MustFunc("slow_echo", func(ctx context.Context, in demotools.EchoArgs) (string, error) {
		started <- struct{}{}
		select {
		case <-time.After(700 * time.Millisecond):
			return in.Text, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	w := f.StartWorker(worker.Config{ShutdownGrace: 10 * time.Second}, slowEcho)
	d := f.Dispatcher(dispatcher.Config{})
	waitLive(t, d, "slow_echo", 1)

	results := make(chan windlass.ToolResult, 4)
	for i := range 4 {
		go func() {
			r, _ := d.Call(context.Background(), "slow_echo", map[string]string{"text": fmt.Sprint(i)})
			results <- r
		}()
	}
	for range 4 {
		<-started
	}
	// Stop returns after the running calls finished and the worker withdrew.
	if err := w.Stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	for range 4 {
		r := <-results
		if r.IsError {
			t.Errorf("a running call did not finish across a graceful stop: %+v", r)
		}
	}
	// Withdrawn: the dispatcher stops routing to it without waiting the TTL.
	start := time.Now()
	waitLive(t, d, "slow_echo", 0)
	if time.Since(start) > f.Registry().TTL() {
		t.Errorf("withdrawal took %s to reach the dispatcher", time.Since(start))
	}
}

func TestWorkersComeAndGo(t *testing.T) {
	t.Parallel()
	f := newFleet(t, fleettest.WithRegistryTTL(time.Second))
	ttl := f.Registry().TTL()
	d := f.Dispatcher(dispatcher.Config{})
	f.StartWorker(worker.Config{ID: "first"}, demotools.Echo())
	start := time.Now()
	waitLive(t, d, "echo", 1)
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("new worker seen after %s", el)
	}

	// A dead worker: its registry connection is cut so its heartbeats stop
	// and it never withdraws; the dispatcher drops it within its TTL.
	deadClient := redis.NewClient(&redis.Options{Addr: f.Redis.Addr()})
	deadReg, err := registry.New(registry.Config{Client: deadClient, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	f.StartWorker(worker.Config{ID: "doomed", Registry: deadReg}, demotools.Echo())
	waitLive(t, d, "echo", 2)
	_ = deadClient.Close()
	cut := time.Now()
	waitLive(t, d, "echo", 1)
	if el := time.Since(cut); el > ttl+500*time.Millisecond {
		t.Errorf("dead worker dropped after %s, TTL %s", el, ttl)
	}
}

func TestSubmitOnOneFetchOnAnother(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.StartWorker(worker.Config{}, demotools.Add(), demotools.Sleep())
	a, b := f.Dispatcher(dispatcher.Config{}), f.Dispatcher(dispatcher.Config{})
	waitLive(t, a, "add", 1)
	waitLive(t, b, "sleep", 1)

	id, err := a.Submit(t.Context(), "add", map[string]int{"a": 40, "b": 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r, err := b.Wait(ctx, id)
	if err != nil || r.Content != "42" || r.CallID != id {
		t.Fatalf("Wait on the other instance = %+v, %v", r, err)
	}
	// Wait may hand over the result as it is published, a moment before
	// the results stream has stored it; Result reads the stream.
	var r2 windlass.ToolResult
	fleettest.WaitFor(t, 2*time.Second, "the result stored and fetchable", func() bool {
		r2, err = b.Result(ctx, id)
		return err == nil
	})
	if r2.Content != "42" {
		t.Errorf("Result = %+v", r2)
	}

	// A call still running: Result says not yet; Wait gets it live.
	id, err = a.Submit(t.Context(), "sleep", map[string]float64{"seconds": 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Result(ctx, id); !errors.Is(err, dispatcher.ErrNoResult) {
		t.Errorf("Result of a running call = %v, want ErrNoResult", err)
	}
	r, err = b.Wait(ctx, id)
	if err != nil || !strings.HasPrefix(r.Content, "slept") {
		t.Errorf("Wait for a running call = %+v, %v", r, err)
	}
}

func TestFleetServesThroughRedisOutage(t *testing.T) {
	t.Parallel()
	f := newFleet(t, fleettest.WithRegistryTTL(time.Second))
	f.StartWorker(worker.Config{}, demotools.Add())
	d := f.Dispatcher(dispatcher.Config{})
	waitLive(t, d, "add", 1)

	f.Redis.Kill()
	fleettest.WaitFor(t, 5*time.Second, "staleness reported", func() bool { return d.Staleness() > time.Second })
	time.Sleep(time.Second) // past the lease TTL, with no renewal possible
	for i := range 20 {
		r, err := d.Call(t.Context(), "add", map[string]int{"a": i, "b": 1})
		if err != nil || r.Content != fmt.Sprint(i+1) {
			t.Fatalf("call %d during the Redis outage: %+v, %v", i, r, err)
		}
	}
	t.Logf("served 20 calls with a registry view %s stale", d.Staleness().Round(time.Millisecond))

	f.Redis.Restart(t) // empty: the worker's lease re-advertises by itself
	fleettest.WaitFor(t, 10*time.Second, "view fresh again", func() bool { return d.Staleness() < 500*time.Millisecond })
	waitLive(t, d, "add", 1)
	if r, _ := d.Call(t.Context(), "add", map[string]int{"a": 1, "b": 1}); r.Content != "2" {
		t.Errorf("after the outage: %+v", r)
	}
}
