package export_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel"
	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/telemetry"
	"github.com/windlass-dev/windlass/internal/telemetry/export"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestNothingInstalledByDefault(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{name: "no variables"},
		{name: "exporters none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}},
		{name: "SDK disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "OTEL_TRACES_EXPORTER=zipkin"},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, wantErr: "http/protobuf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel, err := export.Setup(t.Context(), export.Config{Getenv: env(tc.env)})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Setup: %v, want an error naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tel.Traces || tel.Metrics || tel.Handler != nil {
				t.Errorf("installed %+v, want nothing", tel)
			}
			if telemetry.NewTracer(nil).Enabled() {
				t.Error("tracing is on")
			}
		})
	}
}

// TestOTLPAndPrometheus sets an OTLP endpoint (a local HTTP server) and
// asks for Prometheus: spans reach the endpoint on shutdown, and /metrics
// scraped over HTTP parses as the Prometheus text format with the fleet's
// metrics in it.
func TestOTLPAndPrometheus(t *testing.T) {
	var mu sync.Mutex
	paths := map[string]int{}
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		paths[r.URL.Path]++
		mu.Unlock()
	}))
	defer collector.Close()
	// Setup installs the global providers: put back what was there, so
	// that a later test (or this package's tests again, with -count) finds
	// nothing installed.
	tp, mp, prop := otel.GetTracerProvider(), otel.GetMeterProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		otel.SetTracerProvider(tp)
		otel.SetMeterProvider(mp)
		otel.SetTextMapPropagator(prop)
	})
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_METRICS_EXPORTER", "none")

	tel, err := export.Setup(t.Context(), export.Config{ServiceName: "windlass-test", Prometheus: true})
	if err != nil {
		t.Fatal(err)
	}
	if !tel.Traces || !tel.Metrics || tel.Handler == nil {
		t.Fatalf("installed %+v, want traces, metrics and a handler", tel)
	}
	tr := telemetry.NewTracer(nil)
	if !tr.Enabled() {
		t.Fatal("tracing off after Setup installed a provider")
	}
	_, span := tr.Start(t.Context(), "send windlass.call.add")
	span.End()
	m := telemetry.NewWorkerMetrics(nil)
	if m == nil {
		t.Fatal("worker metrics off after Setup installed a provider")
	}
	done := m.Started(t.Context(), "add", time.Now().Add(-time.Second))
	done(windlass.ToolResult{Name: "add"})
	m.Answered(t.Context(), windlass.ToolResult{Name: "add"})

	srv := httptest.NewServer(tel.Handler)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics is not the Prometheus text format: %v", err)
	}
	calls, ok := families["windlass_worker_calls_total"]
	if !ok {
		t.Fatalf("no windlass_worker_calls_total among %d families", len(families))
	}
	if v := calls.GetMetric()[0].GetCounter().GetValue(); v != 1 {
		t.Errorf("windlass_worker_calls_total = %v, want 1", v)
	}
	for _, name := range []string{"windlass_worker_queue_wait_seconds", "windlass_worker_execution_duration_seconds", "go_goroutines"} {
		if _, ok := families[name]; !ok {
			t.Errorf("no %s in /metrics", name)
		}
	}
	// No series carries an empty label (the exporter's otel_scope_version=""
	// and otel_scope_schema_url=""); the scope's name stays.
	for name, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == "" {
					t.Errorf("%s carries the empty label %s=\"\"", name, l.GetName())
				}
			}
		}
	}
	if l := calls.GetMetric()[0].GetLabel(); !slices.ContainsFunc(l, func(l *dto.LabelPair) bool {
		return l.GetName() == "otel_scope_name" && l.GetValue() == telemetry.ScopeName
	}) {
		t.Errorf("windlass_worker_calls_total labels %v, want otel_scope_name=%q", l, telemetry.ScopeName)
	}

	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if paths["/v1/traces"] == 0 {
		t.Errorf("the OTLP endpoint received %v, want spans on /v1/traces", paths)
	}
}
