package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bench is one test's NATS server, a results inbox and helpers to publish
// raw call messages the way a dispatcher (or a misbehaving client) would.
type bench struct {
	t       *testing.T
	nats    *testserver.NATS
	js      jetstream.JetStream
	results chan windlass.ToolResult
}

const origin = "testorigin"

func newBench(t *testing.T) *bench {
	t.Helper()
	ns := testserver.StartNATS(t)
	nc := ns.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := layout.EnsureStreams(t.Context(), js, layout.CallsConfig(layout.StreamOptions{}), layout.ResultsConfig(layout.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
	b := &bench{t: t, nats: ns, js: js, results: make(chan windlass.ToolResult, 100)}
	sub, err := nc.Subscribe(layout.ResultInbox(origin), func(m *nats.Msg) {
		var r windlass.ToolResult
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Errorf("undecodable result %q: %v", m.Data, err)
			return
		}
		b.results <- r
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return b
}

// start runs a worker with cfg and the tool until the test ends (or stop).
func (b *bench) start(cfg worker.Config, tool windlass.Tool, opts ...worker.ToolOption) (w *worker.Worker, stop func()) {
	b.t.Helper()
	var err error
	if cfg.JetStream == nil {
		js, err := jetstream.New(b.nats.Connect(b.t))
		if err != nil {
			b.t.Fatal(err)
		}
		cfg.JetStream = js
	}
	w, err = worker.New(cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := w.Register(tool, opts...); err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				b.t.Errorf("Run = %v", err)
			}
		})
	}
	b.t.Cleanup(stop)
	// Serving once its consumer exists and is pulling: on a loaded machine
	// starting takes seconds.
	fleettest.WaitFor(b.t, fleettest.StartTimeout, "worker pulling", func() bool {
		c, err := b.js.Consumer(context.Background(), layout.CallsStream, layout.ConsumerName(tool.Spec().Name))
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumWaiting > 0
	})
	return w, stop
}

func (b *bench) publishRaw(tool string, data []byte) {
	b.t.Helper()
	msg := &nats.Msg{Subject: layout.CallSubject(tool, fleettest.CallIDOf(data)), Data: data, Header: nats.Header{layout.HeaderOrigin: []string{origin}}}
	if _, err := b.js.PublishMsg(b.t.Context(), msg); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bench) publish(call windlass.ToolCall) {
	b.t.Helper()
	data, err := json.Marshal(call)
	if err != nil {
		b.t.Fatal(err)
	}
	b.publishRaw(call.Name, data)
}

func (b *bench) result(within time.Duration) windlass.ToolResult {
	b.t.Helper()
	select {
	case r := <-b.results:
		return r
	case <-time.After(within):
		b.t.Fatalf("no result within %s", within)
		return windlass.ToolResult{}
	}
}

func (b *bench) noResult(within time.Duration) {
	b.t.Helper()
	select {
	case r := <-b.results:
		b.t.Fatalf("unexpected result %+v", r)
	case <-time.After(within):
	}
}

// consumerSettled waits until the tool's consumer has nothing pending or
// unacknowledged, and returns its info.
func (b *bench) consumerSettled(tool string) *jetstream.ConsumerInfo {
	b.t.Helper()
	var info *jetstream.ConsumerInfo
	fleettest.WaitFor(b.t, 5*time.Second, "consumer settled", func() bool {
		c, err := b.js.Consumer(context.Background(), layout.CallsStream, layout.ConsumerName(tool))
		if err != nil {
			return false
		}
		info, err = c.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	return info
}

// sleeper is a tool that runs for d (or until its context ends) and
// counts its executions.
func sleeper(name string, d time.Duration, runs *atomic.Int64) windlass.Tool {
	return windlass.MustFunc(name, func(ctx context.Context, _ struct{}) (string, error) {
		runs.Add(1)
		select {
		case <-time.After(d):
			return "done", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
}

// countingEcho is an echo tool that counts its executions.
func countingEcho(runs *atomic.Int64, opts ...windlass.FuncOption) windlass.Tool {
	return windlass.MustFunc("echo", func(ctx context.Context, in struct {
		Text string `json:"text"`
	}) (string, error) {
		runs.Add(1)
		return in.Text, nil
	}, opts...)
}

func TestMalformedMessages(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var runs atomic.Int64
	w, _ := b.start(worker.Config{}, countingEcho(&runs))

	tests := []struct {
		name     string
		data     string
		wantCode windlass.ErrorCode // "" means no result can be sent (no readable id)
		wantText string
	}{
		{name: "arguments not an object", data: `{"id":"bad-args","name":"echo","arguments":[1]}`, wantCode: windlass.CodeInvalidCall, wantText: "arguments must be a JSON object"},
		{name: "invalid tool name", data: `{"id":"bad-name","name":"e.cho","arguments":{}}`, wantCode: windlass.CodeInvalidCall, wantText: "name"},
		{name: "wrong subject", data: `{"id":"other-tool","name":"add","arguments":{}}`, wantCode: windlass.CodeInvalidCall, wantText: `arrived on the subject of "echo"`},
		{name: "arguments against the schema", data: `{"id":"bad-type","name":"echo","arguments":{"text":7}}`, wantCode: windlass.CodeInvalidArguments, wantText: "$.text"},
		{name: "not JSON", data: `not json at all`},
		{name: "no id", data: `{"name":"echo","arguments":{}}`},
	}
	for _, tt := range tests {
		b.publishRaw("echo", []byte(tt.data))
		if tt.wantCode == "" {
			b.noResult(300 * time.Millisecond)
			continue
		}
		r := b.result(5 * time.Second)
		if r.Code() != tt.wantCode || !strings.Contains(r.Content, tt.wantText) {
			t.Errorf("%s: result %+v, want %s containing %q", tt.name, r, tt.wantCode, tt.wantText)
		}
	}
	info := b.consumerSettled("echo")
	if info.NumRedelivered != 0 || info.Delivered.Consumer != uint64(len(tests)) {
		t.Errorf("consumer: delivered %d, redelivered %d; want %d deliveries, none repeated", info.Delivered.Consumer, info.NumRedelivered, len(tests))
	}
	if runs.Load() != 0 {
		t.Errorf("the tool ran %d times for malformed calls", runs.Load())
	}
	if s := w.Stats(); s.Malformed != 4 {
		t.Errorf("stats = %+v, want 4 malformed", s)
	}
}

func TestCallsRefusedWithoutRunning(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var runs atomic.Int64
	tool := countingEcho(&runs)
	b.start(worker.Config{}, tool)
	tests := []struct {
		name     string
		call     windlass.ToolCall
		wantCode windlass.ErrorCode
		wantText string
	}{
		{name: "past deadline", call: windlass.ToolCall{ID: "late", Name: "echo", Deadline: time.Now().Add(-time.Second)}, wantCode: windlass.CodeTimeout, wantText: "before a worker took it"},
		{name: "spec mismatch", call: windlass.ToolCall{ID: "old-schema", Name: "echo", SpecHash: "0123456789abcdef"}, wantCode: windlass.CodeSpecMismatch, wantText: tool.Spec().Hash()},
	}
	for _, tt := range tests {
		b.publish(tt.call)
		r := b.result(5 * time.Second)
		if r.CallID != tt.call.ID || r.Code() != tt.wantCode || !strings.Contains(r.Content, tt.wantText) {
			t.Errorf("%s: %+v", tt.name, r)
		}
	}
	// The matching spec hash runs.
	b.publish(windlass.ToolCall{ID: "current", Name: "echo", SpecHash: tool.Spec().Hash(), Arguments: json.RawMessage(`{"text":"ok"}`)})
	if r := b.result(5 * time.Second); r.IsError || r.Content != "ok" || r.Attempt != 1 || r.Worker == "" {
		t.Errorf("matching hash: %+v", r)
	}
	if runs.Load() != 1 {
		t.Errorf("tool ran %d times, want once", runs.Load())
	}
}

func TestLongCallIsKeptAlive(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	// An ack wait of 2 s, not the 300 ms minimum: the in-progress acks go
	// every 667 ms, so a machine loaded by other suites cannot starve them
	// past the ack wait (seen with 1 s under load).
	b.longCallRunsOnce(worker.Config{AckWait: 2 * time.Second}, "in-progress acks did not keep the call")
}

// longCallRunsOnce starts a worker with cfg serving "slow" (5 s a call,
// 2.5 times an ack wait of 2 s), makes one call, and fails the test unless
// it was answered on its first delivery, ran once and was never
// redelivered; why says what failed if it was.
func (b *bench) longCallRunsOnce(cfg worker.Config, why string) {
	b.t.Helper()
	var runs atomic.Int64
	b.start(cfg, sleeper("slow", 5*time.Second, &runs))
	b.publish(windlass.ToolCall{ID: "long", Name: "slow"})
	r := b.result(20 * time.Second)
	if r.IsError || r.Attempt != 1 {
		b.t.Fatalf("result = %+v", r)
	}
	if info := b.consumerSettled("slow"); info.NumRedelivered != 0 || runs.Load() != 1 {
		b.t.Errorf("redelivered %d, ran %d times: %s", info.NumRedelivered, runs.Load(), why)
	}
}

func TestQueueWaitBound(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var runs atomic.Int64
	// Queued before any worker exists, then left waiting past the bound.
	b.publish(windlass.ToolCall{ID: "stale", Name: "echo"})
	time.Sleep(400 * time.Millisecond) // the call ages in the queue: this is the condition under test
	b.start(worker.Config{}, countingEcho(&runs), worker.WithMaxQueueWait(200*time.Millisecond))
	r := b.result(5 * time.Second)
	if r.Code() != windlass.CodeTimeout || !strings.Contains(r.Content, "in the queue") || runs.Load() != 0 {
		t.Errorf("result = %+v, runs %d", r, runs.Load())
	}
	b.publish(windlass.ToolCall{ID: "fresh", Name: "echo", Arguments: json.RawMessage(`{"text":"x"}`)})
	if r := b.result(5 * time.Second); r.IsError {
		t.Errorf("fresh call: %+v", r)
	}
}

func TestShutdownRequeuesInterruptedCalls(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	started := make(chan int, 4)
	stubborn := windlass.MustFunc("stubborn", func(ctx context.Context, _ struct{}) (string, error) {
		info, _ := windlass.CallInfoFromContext(ctx)
		started <- info.Attempt
		if info.Attempt > 1 {
			return "finished on a later attempt", nil
		}
		<-ctx.Done() // outlasts the first worker's shutdown grace
		return "", ctx.Err()
	})
	first, stopFirst := b.start(worker.Config{ID: "first", ShutdownGrace: 200 * time.Millisecond}, stubborn)
	b.publish(windlass.ToolCall{ID: "interrupted", Name: "stubborn"})
	select {
	case a := <-started:
		if a != 1 {
			t.Fatalf("first attempt = %d", a)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call never started")
	}
	stopFirst()
	if s := first.Stats(); s.Requeued != 1 || s.Failed != 0 {
		t.Errorf("first worker stats = %+v: the interrupted call must be requeued, not answered", s)
	}
	b.start(worker.Config{ID: "second"}, stubborn)
	r := b.result(10 * time.Second)
	if r.IsError || r.Worker != "second" || r.Attempt != 2 {
		t.Errorf("result = %+v", r)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var running, peak atomic.Int64
	release := make(chan struct{})
	busy := windlass.MustFunc("busy", func(ctx context.Context, _ struct{}) (string, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		return "ok", nil
	})
	b.start(worker.Config{}, busy, worker.WithConcurrency(2))
	for i := range 6 {
		b.publish(windlass.ToolCall{ID: "c" + string(rune('0'+i)), Name: "busy"})
	}
	fleettest.WaitFor(b.t, 5*time.Second, "two calls running", func() bool { return running.Load() == 2 })
	time.Sleep(200 * time.Millisecond) // give a third call the chance to start, which it must not
	if p := peak.Load(); p != 2 {
		t.Errorf("peak concurrency = %d, want 2", p)
	}
	close(release)
	for range 6 {
		if r := b.result(5 * time.Second); r.IsError {
			t.Errorf("result %+v", r)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  worker.Config
		want string
	}{
		{name: "no jetstream", cfg: worker.Config{}, want: "JetStream"},
	}
	for _, tt := range tests {
		if _, err := worker.New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	js, _ := jetstream.New(testserver.StartNATS(t).Connect(t))
	bad := []struct {
		name string
		cfg  worker.Config
		want string
	}{
		{name: "short ack wait", cfg: worker.Config{JetStream: js, AckWait: 10 * time.Millisecond}, want: "AckWait"},
		{name: "negative concurrency", cfg: worker.Config{JetStream: js, MaxConcurrency: -1}, want: "MaxConcurrency"},
		{name: "negative grace", cfg: worker.Config{JetStream: js, ShutdownGrace: -1}, want: "ShutdownGrace"},
	}
	for _, tt := range bad {
		if _, err := worker.New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	w, _ := worker.New(worker.Config{JetStream: js})
	if err := w.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "no tools") {
		t.Errorf("Run without tools: %v", err)
	}
	w, _ = worker.New(worker.Config{JetStream: js})
	echo := windlass.MustFunc("echo", func(ctx context.Context, _ struct{}) (int, error) { return 0, nil })
	if err := w.Register(echo); err != nil {
		t.Fatal(err)
	}
	if err := w.Register(echo); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("duplicate register: %v", err)
	}
	if err := w.Register(echo, worker.WithConcurrency(0)); err == nil {
		t.Error("zero concurrency accepted")
	}
}

func TestQueuedCallsAreNotRedeliveredWhileSlotsAreBusy(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var mu sync.Mutex
	runs := map[string]int{}
	slow := windlass.MustFunc("slow", func(ctx context.Context, _ struct{}) (string, error) {
		info, _ := windlass.CallInfoFromContext(ctx)
		mu.Lock()
		runs[info.ID]++
		mu.Unlock()
		select {
		case <-time.After(1200 * time.Millisecond): // over twice the ack wait
			return "ok", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	b.start(worker.Config{AckWait: 500 * time.Millisecond}, slow, worker.WithConcurrency(2))
	for i := range 6 {
		b.publish(windlass.ToolCall{ID: fmt.Sprint("q", i), Name: "slow"})
	}
	for range 6 {
		if r := b.result(15 * time.Second); r.IsError || r.Attempt != 1 {
			t.Errorf("result %+v: a queued call must wait in the stream, not in a buffer, and run once", r)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("call %s ran %d times", id, n)
		}
	}
}

func TestConsumerDeletedUnderTheWorkerIsRecreated(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var runs atomic.Int64
	b.start(worker.Config{}, countingEcho(&runs))
	if err := b.js.DeleteConsumer(t.Context(), layout.CallsStream, layout.ConsumerName("echo")); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(b.t, 10*time.Second, "consumer recreated", func() bool {
		_, err := b.js.Consumer(context.Background(), layout.CallsStream, layout.ConsumerName("echo"))
		return err == nil
	})
	b.publish(windlass.ToolCall{ID: "after", Name: "echo", Arguments: json.RawMessage(`{"text":"back"}`)})
	if r := b.result(10 * time.Second); r.IsError || r.Content != "back" {
		t.Errorf("result = %+v", r)
	}
}
