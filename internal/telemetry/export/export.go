// Package export installs the OpenTelemetry SDK for the windlass command's
// long-running services, the way the ecosystem expects: OTLP over HTTP
// configured by the standard OTEL_* environment variables, and a
// Prometheus /metrics handler. With none of those set it installs nothing,
// so the fleet's instrumentation stays on the API's no-ops and costs
// nothing.
//
// Traces are exported when OTEL_TRACES_EXPORTER is "otlp" or "console"
// (stdout), or, when it is unset, when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; metrics likewise with
// OTEL_METRICS_EXPORTER and OTEL_EXPORTER_OTLP_METRICS_ENDPOINT.
// OTEL_SDK_DISABLED=true turns both off. The exporters read the rest
// themselves (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _INSECURE…), the SDK
// the sampler (OTEL_TRACES_SAMPLER) and the resource (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES). OTEL_EXPORTER_OTLP_PROTOCOL must be
// http/protobuf (the default) or unset.
package export

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Config configures [Setup].
type Config struct {
	// ServiceName is service.name unless OTEL_SERVICE_NAME sets it.
	// Default "windlass".
	ServiceName string
	// Prometheus installs a metrics reader served by Telemetry.Metrics.
	Prometheus bool
	// Getenv reads the environment. Default os.Getenv.
	Getenv func(string) string
}

// withDefaults returns c with every zero field set to its default: the one
// place Setup's defaults are decided. No field can be wrong, so Config has
// no validate.
func (c Config) withDefaults() Config {
	c.ServiceName = cmp.Or(c.ServiceName, "windlass")
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	return c
}

// Telemetry is what Setup installed.
type Telemetry struct {
	// Traces reports that a tracer provider was installed globally.
	Traces bool
	// Metrics reports that a meter provider was installed globally.
	Metrics bool
	// Handler serves the Prometheus text format; nil unless
	// Config.Prometheus.
	Handler http.Handler

	shutdown []func(context.Context) error
}

// Setup installs the global tracer and meter providers the environment
// (and cfg) ask for, and the W3C trace context propagator with them. Call
// Shutdown on the result to flush and stop the exporters.
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	cfg = cfg.withDefaults()
	getenv := cfg.Getenv
	t := &Telemetry{}
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return t, nil
	}
	traces, err := exporterKind(getenv, "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if err != nil {
		return nil, err
	}
	metrics, err := exporterKind(getenv, "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
	if err != nil {
		return nil, err
	}
	if traces == "" && metrics == "" && !cfg.Prometheus {
		return t, nil
	}
	if p := getenv("OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" && p != "http/protobuf" && (traces == "otlp" || metrics == "otlp") {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: only http/protobuf is supported", p)
	}
	res := serviceResource(ctx, cfg.ServiceName)
	if err := t.installTraces(ctx, traces, res); err != nil {
		return nil, err
	}
	if err := t.installMetrics(ctx, metrics == "otlp", cfg.Prometheus, res); err != nil {
		return nil, errors.Join(err, t.Shutdown(ctx))
	}
	return t, nil
}

// serviceResource describes the process: service.name, then what
// OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME say.
func serviceResource(ctx context.Context, name string) *resource.Resource {
	res := resource.NewSchemaless(attribute.String("service.name", name))
	if merged, err := resource.Merge(resource.Default(), res); err == nil {
		res = merged
	}
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	return res
}

// installTraces installs the global tracer provider exporting to kind
// ("otlp", "console"; "" for none) and the W3C propagators.
func (t *Telemetry) installTraces(ctx context.Context, kind string, res *resource.Resource) error {
	var exp sdktrace.SpanExporter
	var err error
	switch kind {
	case "otlp":
		exp, err = otlptracehttp.New(ctx)
	case "console":
		exp, err = stdouttrace.New(stdouttrace.WithWriter(os.Stderr))
	default:
		return nil
	}
	if err != nil {
		return fmt.Errorf("trace exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	t.Traces = true
	t.shutdown = append(t.shutdown, tp.Shutdown)
	return nil
}

// installMetrics installs the global meter provider with an OTLP reader,
// a Prometheus one (served by t.Handler), both or neither.
func (t *Telemetry) installMetrics(ctx context.Context, otlp, prom bool, res *resource.Resource) error {
	var readers []sdkmetric.Option
	if otlp {
		exp, err := otlpmetrichttp.New(ctx)
		if err != nil {
			return fmt.Errorf("metric exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	}
	if prom {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		exp, err := otelprom.New(otelprom.WithRegisterer(reg))
		if err != nil {
			return fmt.Errorf("prometheus exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(exp))
		t.Handler = promhttp.HandlerFor(withoutEmptyLabels(reg), promhttp.HandlerOpts{})
	}
	if len(readers) == 0 {
		return nil
	}
	mp := sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res))...)
	otel.SetMeterProvider(mp)
	t.Metrics = true
	t.shutdown = append(t.shutdown, mp.Shutdown)
	return nil
}

// withoutEmptyLabels is g with every label whose value is empty left out:
// the exporter labels every series with its scope's version and schema
// URL, which are empty for the fleet's meter (otel_scope_version="",
// otel_scope_schema_url=""), and to Prometheus an empty label is no label.
// Its options only drop all the scope's labels, its name too.
func withoutEmptyLabels(g prometheus.Gatherer) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		families, err := g.Gather()
		for _, f := range families {
			for _, m := range f.GetMetric() {
				m.Label = slices.DeleteFunc(m.Label, func(l *dto.LabelPair) bool { return l.GetValue() == "" })
			}
		}
		return families, err
	})
}

// exporterKind reads OTEL_<SIGNAL>_EXPORTER: "otlp", "console" or ""
// (none). Unset, it is "otlp" when an OTLP endpoint is set.
func exporterKind(getenv func(string) string, kindVar, endpointVar string) (string, error) {
	kind := strings.ToLower(strings.TrimSpace(getenv(kindVar)))
	switch kind {
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv(endpointVar) != "" {
			return "otlp", nil
		}
		return "", nil
	case "none":
		return "", nil
	case "otlp", "console":
		return kind, nil
	case "prometheus":
		return "", nil // served on --metrics-listen
	}
	return "", fmt.Errorf("%s=%s: use otlp, console or none", kindVar, kind)
}

// Shutdown flushes and stops what Setup installed.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	t.shutdown = nil
	return errors.Join(errs...)
}
