package dispatcher

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
)

// benchDispatcher is a dispatcher whose view has a tool "greet" with a
// live (advertised) worker, on real NATS and Redis; no worker runs.
func benchDispatcher(tb testing.TB, tp trace.TracerProvider) *Dispatcher {
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
	d, err := New(tb.Context(), Config{Conn: nats.Connect(tb), Registry: reg, TracerProvider: tp})
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
