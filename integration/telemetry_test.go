package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/telemetry"
	"github.com/windlass-dev/windlass/worker"
)

// spanLine is one span as the stdout exporter writes it.
type spanLine struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	SpanKind    int
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
	Status struct{ Code, Description string }
}

func (s spanLine) attr(key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return fmt.Sprint(a.Value.Value)
		}
	}
	return ""
}

// readSpans reads the spans a worker process has written so far.
func readSpans(t *testing.T, path string) []spanLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var spans []spanLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var s spanLine
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			continue // a line still being written
		}
		spans = append(spans, s)
	}
	return spans
}

// startTraceWorker starts the trace test's worker process and waits until
// it serves its tools; the test's cleanup stops it with SIGTERM.
func startTraceWorker(t *testing.T, f *fleettest.Fleet, dir string) (spansPath, logPath string) {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spansPath, logPath = filepath.Join(dir, "spans.jsonl"), filepath.Join(dir, "worker-log.jsonl")
	const id = "trace-worker"
	var out bytes.Buffer
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), traceWorkerEnv+"="+id, traceNATSEnv+"="+f.NATS.URL(), traceRedisEnv+"="+f.Redis.Addr(),
		traceSpansEnv+"="+spansPath, traceLogEnv+"="+logPath)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("trace worker: %v\n%s", err, out.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("trace worker did not stop within 30 s of SIGTERM")
		}
	})
	reg := f.Registry()
	fleettest.WaitFor(t, 60*time.Second, "trace worker advertised", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("trace worker exited at start: %v\n%s", err, out.String())
		default:
		}
		info, err := reg.Lookup(context.Background(), traceToolBroken)
		return err == nil && slices.Contains(info.LiveWorkers(time.Now()), id)
	})
	return spansPath, logPath
}

// TestTraceAcrossProcesses follows calls from the caller's span through
// the dispatcher's producer span, the NATS headers, and the consumer and
// execute_tool spans of a worker in another process: one trace, linked
// parent to child, with the messaging and gen_ai attributes, and errors in
// the spans' status. The worker's log lines inside a call carry its ids.
func TestTraceAcrossProcesses(t *testing.T) {
	f := newFleet(t)
	spansPath, logPath := startTraceWorker(t, f, t.TempDir())

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	d := f.Dispatcher(dispatcher.Config{TracerProvider: tp})

	cases := []struct {
		tool, args, callID string
		wantErr            bool
	}{
		{traceToolHello, `{"name":"Ada"}`, "trace-ok-1", false},
		{traceToolBroken, `{}`, "trace-err-1", true},
	}
	for _, tc := range cases {
		t.Run(tc.tool, func(t *testing.T) {
			ctx, turn := tp.Tracer("agent").Start(t.Context(), "agent turn")
			r, err := d.Call(ctx, tc.tool, json.RawMessage(tc.args), dispatcher.WithCallID(tc.callID), dispatcher.WithTimeout(30*time.Second))
			turn.End()
			if err != nil || r.IsError != tc.wantErr {
				t.Fatalf("call %s: %+v, %v; want is_error %v", tc.tool, r, err, tc.wantErr)
			}
			var send sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if s.Name() == "send windlass.call."+tc.tool && s.Parent().SpanID() == turn.SpanContext().SpanID() {
					send = s
				}
			}
			if send == nil {
				t.Fatal("no producer span that is a child of the caller's span")
			}
			if send.SpanKind() != trace.SpanKindProducer || send.SpanContext().TraceID() != turn.SpanContext().TraceID() {
				t.Errorf("producer span: kind %v, trace %s; want producer in the caller's trace %s", send.SpanKind(), send.SpanContext().TraceID(), turn.SpanContext().TraceID())
			}
			traceID := send.SpanContext().TraceID().String()

			var process, execute spanLine
			fleettest.WaitFor(t, 30*time.Second, "the worker's spans of "+tc.callID, func() bool {
				process, execute = spanLine{}, spanLine{}
				for _, s := range readSpans(t, spansPath) {
					if s.SpanContext.TraceID != traceID {
						continue
					}
					switch s.Name {
					case "process windlass.call." + tc.tool:
						process = s
					case "execute_tool " + tc.tool:
						execute = s
					}
				}
				return process.Name != "" && execute.Name != ""
			})
			if process.Parent.SpanID != send.SpanContext().SpanID().String() {
				t.Errorf("consumer span's parent %s, want the producer span %s", process.Parent.SpanID, send.SpanContext().SpanID())
			}
			if process.SpanKind != int(trace.SpanKindConsumer) {
				t.Errorf("consumer span kind %d, want consumer (%d)", process.SpanKind, trace.SpanKindConsumer)
			}
			if execute.Parent.SpanID != process.SpanContext.SpanID {
				t.Errorf("execute_tool span's parent %s, want the consumer span %s", execute.Parent.SpanID, process.SpanContext.SpanID)
			}
			for key, want := range map[string]string{
				"messaging.system": "nats", "messaging.destination.name": layout.CallSubject(tc.tool, tc.callID), "messaging.destination.template": "windlass.call." + tc.tool + ".*",
				"messaging.operation.type": "process", "messaging.message.id": tc.callID,
				"messaging.consumer.group.name": "tool-" + tc.tool,
			} {
				if got := process.attr(key); got != want {
					t.Errorf("consumer span %s = %q, want %q", key, got, want)
				}
			}
			for key, want := range map[string]string{
				"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tc.tool, "gen_ai.tool.call.id": tc.callID,
			} {
				if got := execute.attr(key); got != want {
					t.Errorf("execute_tool span %s = %q, want %q", key, got, want)
				}
			}
			wantStatus := "Unset"
			if tc.wantErr {
				wantStatus = "Error"
				if got := execute.attr("error.type"); got != "tool_error" {
					t.Errorf("execute_tool span error.type = %q, want tool_error", got)
				}
				if !strings.Contains(execute.Status.Description, traceBrokenError) {
					t.Errorf("execute_tool span status description %q, want the error text", execute.Status.Description)
				}
			}
			if execute.Status.Code != wantStatus || process.Status.Code != wantStatus {
				t.Errorf("status: execute_tool %q, process %q; want %q", execute.Status.Code, process.Status.Code, wantStatus)
			}

			// The worker's line about the call, written with its context.
			var line map[string]any
			fleettest.WaitFor(t, 10*time.Second, "the worker's log line of "+tc.callID, func() bool {
				b, _ := os.ReadFile(logPath)
				for l := range strings.SplitSeq(string(b), "\n") {
					var m map[string]any
					if json.Unmarshal([]byte(l), &m) == nil && m["call_id"] == tc.callID && m["msg"] == "worker: call ran" {
						line = m
						return true
					}
				}
				return false
			})
			if line["trace_id"] != traceID || line["span_id"] != execute.Parent.SpanID {
				t.Errorf("log line trace_id %v span_id %v, want %s and the consumer span %s", line["trace_id"], line["span_id"], traceID, process.SpanContext.SpanID)
			}
		})
	}
}

// TestMetricsCountSubmittedCalls: calls made through Submit (the HTTP
// API's and the MCP server's way) are counted as Call's are, once, by the
// instance that published them, when their result arrives — read here by
// another instance's Wait; resubmits of an accepted id, on either
// instance, are not counted again; a refused submit counts with its code.
func TestMetricsCountSubmittedCalls(t *testing.T) {
	f := newFleet(t)
	readerA, readerB := sdkmetric.NewManualReader(), sdkmetric.NewManualReader()
	mpA, mpB := sdkmetric.NewMeterProvider(sdkmetric.WithReader(readerA)), sdkmetric.NewMeterProvider(sdkmetric.WithReader(readerB))
	t.Cleanup(func() { _ = mpA.Shutdown(context.Background()); _ = mpB.Shutdown(context.Background()) })
	ok := windlass.MustFunc("ok", func(ctx context.Context, _ struct{}) (string, error) { return "fine", nil })
	boom := windlass.MustFunc("boom", func(ctx context.Context, _ struct{}) (string, error) { return "", errors.New("boom") })
	f.StartWorker(worker.Config{}, ok, boom)
	a := f.Dispatcher(dispatcher.Config{MeterProvider: mpA})
	b := f.Dispatcher(dispatcher.Config{MeterProvider: mpB})
	fleettest.WaitCatalog(t, a, "ok", "boom")
	fleettest.WaitCatalog(t, b, "ok", "boom")

	var ids []string
	for tool, n := range map[string]int{"ok": 2, "boom": 1} {
		for i := range n {
			id, err := a.Submit(t.Context(), tool, nil, dispatcher.WithCallID(fmt.Sprintf("%s-%d", tool, i)))
			if err != nil {
				t.Fatalf("submit %s: %v", tool, err)
			}
			ids = append(ids, id)
		}
	}
	for _, d := range []*dispatcher.Dispatcher{a, b} { // the same call again: not a new one
		if _, err := d.Submit(t.Context(), "ok", nil, dispatcher.WithCallID("ok-0")); err != nil {
			t.Fatalf("resubmit ok-0: %v", err)
		}
	}
	var ce *windlass.CallError
	if _, err := a.Submit(t.Context(), "nope", nil); !errors.As(err, &ce) || ce.Code != windlass.CodeUnknownTool {
		t.Fatalf("submit nope: %v, want unknown_tool", err)
	}
	for _, id := range ids {
		if _, err := b.Wait(t.Context(), id); err != nil {
			t.Fatalf("wait %s on the other instance: %v", id, err)
		}
	}

	collect := func(r *sdkmetric.ManualReader) metricdata.ResourceMetrics {
		var rm metricdata.ResourceMetrics
		if err := r.Collect(t.Context(), &rm); err != nil {
			t.Fatal(err)
		}
		return rm
	}
	fleettest.WaitFor(t, 10*time.Second, "the submitting instance counted every submitted call", func() bool {
		got := metricPoints(t, collect(readerA), telemetry.MetricDispatcherCalls)
		return got["key=default,outcome=ok,tool=ok"]+got["key=default,outcome=tool_error,tool=boom"] >= 3
	})
	rmA, rmB := collect(readerA), collect(readerB)
	want := map[string]map[string]float64{
		telemetry.MetricDispatcherCalls:    {"key=default,outcome=ok,tool=ok": 2, "key=default,outcome=tool_error,tool=boom": 1, "key=default,outcome=unknown_tool,tool=nope": 1},
		telemetry.MetricDispatcherDuration: {"key=default,outcome=ok,tool=ok": 2, "key=default,outcome=tool_error,tool=boom": 1},
		telemetry.MetricDispatcherInFlight: {"key=default,tool=ok": 0, "key=default,tool=boom": 0},
	}
	for name, points := range want {
		got := metricPoints(t, rmA, name)
		if len(got) != len(points) {
			t.Errorf("%s on the submitting instance = %v, want %v", name, got, points)
		}
		for k, v := range points {
			if got[k] != v {
				t.Errorf("%s{%s} on the submitting instance = %v, want %v (all: %v)", name, k, got[k], v, got)
			}
		}
	}
	if got := metricPoints(t, rmB, telemetry.MetricDispatcherCalls); len(got) != 0 {
		t.Errorf("%s on the instance that only read results and resubmitted = %v, want none", telemetry.MetricDispatcherCalls, got)
	}
	if got := metricPoints(t, rmB, telemetry.MetricDispatcherInFlight); got["tool=ok"] != 0 {
		t.Errorf("%s on the instance that resubmitted = %v, want 0", telemetry.MetricDispatcherInFlight, got)
	}
}

// metricPoints reads every data point of the named metric as attributes
// (tool=…,outcome=…) → value: the sum of a counter, the count of a
// histogram, the value of a gauge.
func metricPoints(t *testing.T, rm metricdata.ResourceMetrics, name string) map[string]float64 {
	t.Helper()
	key := func(s attribute.Set) string {
		var parts []string
		for _, kv := range s.ToSlice() {
			parts = append(parts, string(kv.Key)+"="+kv.Value.String())
		}
		return strings.Join(parts, ",")
	}
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range data.DataPoints {
					out[key(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range data.DataPoints {
					out[key(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range data.DataPoints {
					out[key(p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range data.DataPoints {
					out[key(p.Attributes)] = float64(p.Count)
				}
			default:
				t.Fatalf("metric %s: unexpected data %T", name, m.Data)
			}
		}
	}
	return out
}

// TestMetricsAfterKnownCalls makes 3 successful calls, 2 failing ones and
// 1 that times out, then reads the dispatcher's and the worker's metrics
// with a manual reader.
func TestMetricsAfterKnownCalls(t *testing.T) {
	f := newFleet(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	ok := windlass.MustFunc("ok", func(ctx context.Context, _ struct{}) (string, error) { return "fine", nil })
	boom := windlass.MustFunc("boom", func(ctx context.Context, _ struct{}) (string, error) { return "", errors.New("boom") })
	slow := windlass.MustFunc("slow", func(ctx context.Context, _ struct{}) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	}, windlass.WithTimeout(300*time.Millisecond))
	w := f.StartWorker(worker.Config{MeterProvider: mp}, ok, boom, slow)
	d := f.Dispatcher(dispatcher.Config{MeterProvider: mp})

	for tool, n := range map[string]int{"ok": 3, "boom": 2, "slow": 1} {
		for range n {
			fleettest.WaitFor(t, 10*time.Second, "the dispatcher sees "+tool, func() bool {
				r, _ := d.Call(t.Context(), tool, nil, dispatcher.WithTimeout(20*time.Second))
				if r.Code() == windlass.CodeNoWorker || r.Code() == windlass.CodeUnknownTool {
					return false
				}
				want := map[string]windlass.ErrorCode{"ok": "", "boom": windlass.CodeToolError, "slow": windlass.CodeTimeout}[tool]
				if r.Code() != want {
					t.Fatalf("call %s: %+v, want code %q", tool, r, want)
				}
				return true
			})
		}
	}
	// One refused before publishing: no such tool.
	if r, _ := d.Call(t.Context(), "nope", nil); r.Code() != windlass.CodeUnknownTool {
		t.Fatalf("call nope: %+v, want unknown_tool", r)
	}

	// The worker counts an answer once the results stream stored it, a
	// moment after the caller may have it: wait for its counts.
	fleettest.WaitFor(t, 10*time.Second, "the worker counted every answer", func() bool {
		s := w.Stats()
		return s.Completed+s.Failed >= 6
	})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]float64{
		telemetry.MetricDispatcherCalls: {
			"key=default,outcome=ok,tool=ok": 3, "key=default,outcome=tool_error,tool=boom": 2, "key=default,outcome=timeout,tool=slow": 1, "key=default,outcome=unknown_tool,tool=nope": 1,
		},
		telemetry.MetricDispatcherDuration: {"key=default,outcome=ok,tool=ok": 3, "key=default,outcome=tool_error,tool=boom": 2, "key=default,outcome=timeout,tool=slow": 1},
		telemetry.MetricDispatcherInFlight: {"key=default,tool=ok": 0, "key=default,tool=boom": 0, "key=default,tool=slow": 0},
		telemetry.MetricWorkerCalls:        {"outcome=ok,tool=ok": 3, "outcome=tool_error,tool=boom": 2, "outcome=timeout,tool=slow": 1},
		telemetry.MetricWorkerDuration:     {"outcome=ok,tool=ok": 3, "outcome=tool_error,tool=boom": 2, "outcome=timeout,tool=slow": 1},
		telemetry.MetricWorkerQueueWait:    {"tool=ok": 3, "tool=boom": 2, "tool=slow": 1},
		telemetry.MetricWorkerInFlight:     {"tool=ok": 0, "tool=boom": 0, "tool=slow": 0},
		telemetry.MetricLiveWorkers:        {"tool=ok": 1, "tool=boom": 1, "tool=slow": 1},
	}
	for name, points := range want {
		got := metricPoints(t, rm, name)
		for k, v := range points {
			if got[k] != v {
				t.Errorf("%s{%s} = %v, want %v (all: %v)", name, k, got[k], v, got)
			}
		}
	}
	if st := metricPoints(t, rm, telemetry.MetricRegistryStaleness); len(st) != 1 || st[""] > 5 {
		t.Errorf("%s = %v, want one point of a few seconds at most", telemetry.MetricRegistryStaleness, st)
	}
	if s := w.Stats(); s.Completed != 3 || s.Failed != 3 {
		t.Errorf("worker stats %+v, want 3 completed and 3 failed", s)
	}
}
