package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOffWithoutAnSDK(t *testing.T) {
	for _, tc := range []struct {
		name string
		tr   telemetry.Tracer
	}{
		{"global, no SDK installed", telemetry.NewTracer(nil)},
		{"noop provider", telemetry.NewTracer(noop.NewTracerProvider())},
		{"zero value", telemetry.Tracer{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.tr.Enabled() {
				t.Fatal("Enabled() = true, want off")
			}
			ctx := t.Context()
			if n := testing.AllocsPerRun(100, func() {
				c, span := tc.tr.Start(ctx, "x")
				span.End()
				_ = c
			}); n != 0 {
				t.Errorf("Start and End off: %.1f allocations, want 0", n)
			}
		})
	}
	if m := telemetry.NewWorkerMetrics(nil); m != nil {
		t.Error("worker metrics on with no SDK installed")
	}
	if m := telemetry.NewDispatcherMetrics(metricnoop.NewMeterProvider()); m != nil {
		t.Error("dispatcher metrics on with a noop provider")
	}
	var m *telemetry.WorkerMetrics // nil-safe
	m.Answered(t.Context(), windlass.ToolResult{Name: "x"})
}

func TestCarrierRoundTrip(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := telemetry.NewTracer(tp)
	if !tr.Enabled() {
		t.Fatal("an injected SDK provider is off")
	}
	ctx, span := tr.Start(t.Context(), "send")
	defer span.End()
	h := nats.Header{}
	telemetry.Inject(ctx, h)
	if h.Get("traceparent") == "" {
		t.Fatalf("no traceparent in %v", h)
	}
	sc, ok := telemetry.RemoteSpanContext(h)
	if !ok || sc.TraceID() != span.SpanContext().TraceID() || sc.SpanID() != span.SpanContext().SpanID() || !sc.IsRemote() {
		t.Errorf("extracted %v, want the span's context, remote", sc)
	}
	if _, ok := telemetry.RemoteSpanContext(nats.Header{}); ok {
		t.Error("a span context from no headers")
	}
}

func TestLogHandlerAddsTraceIDs(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	var buf bytes.Buffer
	log := slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(&buf, nil))).With("worker", "w1")
	ctx, span := tp.Tracer("t").Start(t.Context(), "call")
	log.InfoContext(ctx, "inside")
	span.End()
	log.Info("outside")
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	var in, out map[string]any
	_ = json.Unmarshal(lines[0], &in)
	_ = json.Unmarshal(lines[1], &out)
	if in["trace_id"] != span.SpanContext().TraceID().String() || in["span_id"] != span.SpanContext().SpanID().String() || in["worker"] != "w1" {
		t.Errorf("line inside the span: %v", in)
	}
	if _, ok := out["trace_id"]; ok {
		t.Errorf("line outside any span has a trace_id: %v", out)
	}
}
