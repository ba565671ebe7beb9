package dispatcher

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/telemetry"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
)

// benchDispatcher is a dispatcher whose view has a tool "greet" with a
// live (advertised) worker, on real NATS and Redis; no worker runs.
func benchDispatcher(tb testing.TB, tp trace.TracerProvider) *Dispatcher {
	tb.Helper()
	return idleDispatcher(tb, Config{TracerProvider: tp})
}

// idleDispatcher is benchDispatcher with a Config of its own (Conn and
// Registry are set).
func idleDispatcher(tb testing.TB, cfg Config) *Dispatcher {
	tb.Helper()
	nats := testserver.StartNATS(tb)
	reg, err := registry.New(registry.Config{Client: testserver.StartRedis(tb).Client(tb)})
	if err != nil {
		tb.Fatal(err)
	}
	spec := windlass.MustFunc("greet", func(_ context.Context, in struct {
		Name string `json:"name"`
	}) (string, error) {
		return "hi " + in.Name, nil
	}).Spec()
	lease, err := reg.Advertise(tb.Context(), registry.Advertisement{WorkerID: "bench-worker", Specs: []windlass.Spec{spec}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = lease.Withdraw(context.Background()) })
	cfg.Conn, cfg.Registry = nats.Connect(tb), reg
	d, err := New(tb.Context(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = d.Close() })
	return d
}

var benchArgs = json.RawMessage(`{"name":"Ada"}`)

// prepareAndTrace is the call path up to the publish: check and encode the
// call, start its producer span and inject its trace context, end the span.
func prepareAndTrace(tb testing.TB, ctx context.Context, d *Dispatcher) *prepared {
	p, err := d.prepare(ctx, "greet", benchArgs, nil)
	if err != nil {
		tb.Fatal(err)
	}
	_, span := d.startSend(ctx, p)
	endSend(span, nil)
	return p
}

func TestTracingOffAddsNoAllocation(t *testing.T) {
	d := benchDispatcher(t, nil) // the global provider, no SDK installed
	if d.tracer.Enabled() || d.metrics != nil {
		t.Fatal("with no SDK installed, tracing and metrics must be off")
	}
	ctx := t.Context()
	p := prepareAndTrace(t, ctx, d)
	if p.msg.Header.Get(layout.HeaderTraceparent) != "" {
		t.Errorf("tracing off: the call carries a traceparent header %q", p.msg.Header.Get(layout.HeaderTraceparent))
	}
	if n := testing.AllocsPerRun(200, func() {
		_, span := d.startSend(ctx, p)
		endSend(span, nil)
	}); n != 0 {
		t.Errorf("tracing off: the producer span costs %.1f allocations a call, want 0", n)
	}
	if raceEnabled {
		return // the race detector adds allocations of its own to prepare
	}
	base := testing.AllocsPerRun(200, func() { _, _ = d.prepare(ctx, "greet", benchArgs, nil) })
	traced := testing.AllocsPerRun(200, func() { prepareAndTrace(t, ctx, d) })
	if traced != base {
		t.Errorf("tracing off: prepare+trace allocates %.1f a call, prepare alone %.1f: want no extra", traced, base)
	}
}

func TestTracingOnInjectsTheProducerSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	d := benchDispatcher(t, tp)
	ctx, parent := tp.Tracer("test").Start(t.Context(), "agent turn")
	p := prepareAndTrace(t, ctx, d)
	parent.End()
	tpHeader := p.msg.Header.Get(layout.HeaderTraceparent)
	if tpHeader == "" {
		t.Fatal("tracing on: no traceparent header on the call")
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("recorded %d spans, want the producer span and its parent", len(spans))
	}
	send := spans[0]
	if send.Name() != "send windlass.call.greet" || send.SpanKind() != trace.SpanKindProducer {
		t.Errorf("producer span %q kind %v, want send windlass.call.greet, producer", send.Name(), send.SpanKind())
	}
	if send.Parent().SpanID() != parent.SpanContext().SpanID() || send.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Error("the producer span is not a child of the caller's span")
	}
	want := "00-" + send.SpanContext().TraceID().String() + "-" + send.SpanContext().SpanID().String() + "-01"
	if tpHeader != want {
		t.Errorf("traceparent %q, want the producer span's %q", tpHeader, want)
	}
	attrs := map[string]string{}
	for _, a := range send.Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	for k, v := range map[string]string{
		"messaging.system": "nats", "messaging.destination.name": layout.CallSubject("greet", p.call.ID), "messaging.destination.template": "windlass.call.greet.*", "messaging.message.id": p.call.ID,
		"messaging.operation.type": "send", "gen_ai.tool.name": "greet", "gen_ai.tool.call.id": p.call.ID,
	} {
		if attrs[k] != v {
			t.Errorf("attribute %s = %q, want %q", k, attrs[k], v)
		}
	}
}

// TestSubmittedCallWithoutResultCountsAsTimeout: a submitted call whose
// result never comes (no worker runs here) is in flight until a grace past
// its deadline, then counts as a timeout, once; one left at Close leaves
// the in-flight count.
func TestSubmittedCallWithoutResultCountsAsTimeout(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	d := idleDispatcher(t, Config{MeterProvider: mp})
	points := func() (calls map[string]int64, inFlight int64) {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(t.Context(), &rm); err != nil {
			t.Fatal(err)
		}
		calls = map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				data, ok := m.Data.(metricdata.Sum[int64])
				for _, p := range data.DataPoints {
					switch outcome, _ := p.Attributes.Value(telemetry.Outcome); {
					case ok && m.Name == telemetry.MetricDispatcherCalls:
						calls[outcome.AsString()] += p.Value
					case ok && m.Name == telemetry.MetricDispatcherInFlight:
						inFlight += p.Value
					}
				}
			}
		}
		return calls, inFlight
	}
	if _, err := d.Submit(t.Context(), "greet", benchArgs, WithTimeout(time.Minute)); err != nil {
		t.Fatal(err)
	}
	d.expireCounted(time.Now().Add(time.Minute)) // at its deadline: not yet
	if calls, inFlight := points(); len(calls) != 0 || inFlight != 1 {
		t.Fatalf("before the grace: calls %v, in flight %d; want none and 1", calls, inFlight)
	}
	d.expireCounted(time.Now().Add(time.Minute + resultGrace + time.Second))
	d.expireCounted(time.Now().Add(time.Hour)) // counted once
	if calls, inFlight := points(); calls[string(windlass.CodeTimeout)] != 1 || len(calls) != 1 || inFlight != 0 {
		t.Errorf("past the grace: calls %v, in flight %d; want one timeout and 0", calls, inFlight)
	}
	if _, err := d.Submit(t.Context(), "greet", benchArgs); err != nil {
		t.Fatal(err)
	}
	_ = d.Close()
	if calls, inFlight := points(); len(calls) != 1 || inFlight != 0 {
		t.Errorf("after Close: calls %v, in flight %d; want the one timeout and 0", calls, inFlight)
	}
}

// BenchmarkPrepareTracing measures the call path up to the publish
// (validate, encode, producer span, trace context injection): Baseline
// without the tracing step, Off with it and no SDK installed (the
// default), On with an SDK recording every span.
func BenchmarkPrepareTracing(b *testing.B) {
	run := func(b *testing.B, d *Dispatcher, trace bool) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if trace {
				prepareAndTrace(b, ctx, d)
			} else if _, err := d.prepare(ctx, "greet", benchArgs, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("Baseline", func(b *testing.B) { run(b, benchDispatcher(b, nil), false) })
	b.Run("Off", func(b *testing.B) { run(b, benchDispatcher(b, nil), true) })
	b.Run("On", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter(), sdktrace.WithBatchTimeout(time.Second)))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		run(b, benchDispatcher(b, tp), true)
	})
}

// BenchmarkSendSpan measures the tracing step alone: start the producer
// span, inject its trace context into the call's headers, end it.
func BenchmarkSendSpan(b *testing.B) {
	run := func(b *testing.B, d *Dispatcher) {
		ctx := context.Background()
		p, err := d.prepare(ctx, "greet", benchArgs, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			_, span := d.startSend(ctx, p)
			endSend(span, nil)
		}
	}
	b.Run("Off", func(b *testing.B) { run(b, benchDispatcher(b, nil)) })
	b.Run("On", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter(), sdktrace.WithBatchTimeout(time.Second)))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		run(b, benchDispatcher(b, tp))
	})
}
