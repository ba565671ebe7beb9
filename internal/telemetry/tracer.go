package telemetry

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// The global providers as they are before any SDK is installed: the API's
// delegating no-ops. otel.GetTracerProvider returns the installed provider
// itself once one is set, so comparing with these tells, without an
// allocation, whether an SDK is there. Nil when something installed a
// provider before this package's init (then the global one counts as on).
var defaultTracerProvider, defaultMeterProvider = initialProviders()

func initialProviders() (trace.TracerProvider, metric.MeterProvider) {
	tp, mp := trace.TracerProvider(otel.GetTracerProvider()), metric.MeterProvider(otel.GetMeterProvider())
	if fmt.Sprintf("%T", tp) != "*global.tracerProvider" {
		tp = nil
	}
	if fmt.Sprintf("%T", mp) != "*global.meterProvider" {
		mp = nil
	}
	return tp, mp
}

// Tracer is a component's tracer and whether tracing is on. The zero value
// is off.
type Tracer struct {
	t      trace.Tracer
	global bool // follows the global provider: on once an SDK is installed
}

// NewTracer returns the tracer of tp, or of the global provider when tp is
// nil. A no-op provider is off.
func NewTracer(tp trace.TracerProvider) Tracer {
	if tp == nil {
		return Tracer{t: otel.GetTracerProvider().Tracer(ScopeName), global: true}
	}
	if _, ok := tp.(noop.TracerProvider); ok {
		return Tracer{}
	}
	return Tracer{t: tp.Tracer(ScopeName)}
}

// Enabled reports whether spans are recorded: a provider was injected, or
// an SDK is installed as the global one. It never allocates.
func (t Tracer) Enabled() bool {
	if t.t == nil {
		return false
	}
	return !t.global || otel.GetTracerProvider() != defaultTracerProvider
}

// Start starts a span when tracing is on; when off it returns ctx as it is
// and a no-op span (whose End does nothing to ctx's own span).
func (t Tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !t.Enabled() {
		return ctx, noop.Span{}
	}
	return t.t.Start(ctx, name, opts...)
}

// Meter returns the meter of mp, or of the global provider when mp is nil,
// and whether metrics are on (a provider injected, or an SDK installed
// globally). Create instruments once, from a meter that is on.
func Meter(mp metric.MeterProvider) (metric.Meter, bool) {
	if mp == nil {
		mp = otel.GetMeterProvider()
		if mp == defaultMeterProvider {
			return metricnoop.Meter{}, false
		}
	}
	if _, ok := mp.(metricnoop.MeterProvider); ok {
		return metricnoop.Meter{}, false
	}
	return mp.Meter(ScopeName), true
}

// SetError marks span failed with the result's error code: status Error
// with the message, and error.type = code.
func SetError(span trace.Span, code, message string) {
	if !span.IsRecording() {
		return
	}
	span.SetStatus(codes.Error, message)
	span.SetAttributes(ErrorType.String(code))
}
