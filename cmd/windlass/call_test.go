package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// TestCallJoinsTheWorkersTrace runs `windlass call` with an OTLP endpoint
// in the environment: like the services, it exports its spans there, and
// its producer span is the parent of the worker's consumer span (the call
// carries its traceparent), so the worker's span is no longer a root.
func TestCallJoinsTheWorkersTrace(t *testing.T) {
	var traces atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/v1/traces" {
			traces.Add(1)
		}
	}))
	defer collector.Close()
	// The command installs the global providers: put back what was there.
	tp, mp, prop := otel.GetTracerProvider(), otel.GetMeterProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		otel.SetTracerProvider(tp)
		otel.SetMeterProvider(mp)
		otel.SetTextMapPropagator(prop)
	})
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_METRICS_EXPORTER", "none")
	t.Setenv("WINDLASS_DEV_FILE", filepath.Join(t.TempDir(), "none.json"))

	f := fleettest.New(t)
	rec := tracetest.NewSpanRecorder()
	workerTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = workerTP.Shutdown(context.Background()) })
	add := windlass.MustFunc("add", func(_ context.Context, in struct{ A, B int }) (int, error) { return in.A + in.B, nil })
	f.StartWorker(worker.Config{TracerProvider: workerTP}, add)

	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"call", "add", `{"A":1,"B":2}`, "--nats-url", f.NATS.URL(), "--redis-url", f.Redis.URL()}, &stdout, &stderr); err != nil || strings.TrimSpace(stdout.String()) != "3" {
		t.Fatalf("windlass call = %v, stdout %q, stderr %q; want 3", err, stdout.String(), stderr.String())
	}
	if traces.Load() == 0 {
		t.Error("windlass call exported no spans to the OTLP endpoint of its environment")
	}
	var process sdktrace.ReadOnlySpan
	fleettest.WaitFor(t, 10*time.Second, "the worker's consumer span", func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == "process windlass.call.add" {
				process = s
			}
		}
		return process != nil
	})
	if p := process.Parent(); !p.IsValid() || !p.IsRemote() || p.TraceID() != process.SpanContext().TraceID() {
		t.Errorf("the worker's consumer span has parent %+v; want the remote producer span of windlass call, in its trace", p)
	}
}
