package telemetry

import (
	"context"
	"net/http"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// HeaderCarrier carries the W3C trace context (traceparent, tracestate) in
// NATS message headers. It is a propagation.TextMapCarrier.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier{}

// Get returns the first value of key.
func (c HeaderCarrier) Get(key string) string { return nats.Header(c).Get(key) }

// Set sets key to value.
func (c HeaderCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Propagator is the trace context format on the wire: W3C trace context,
// as PROTOCOL.md states (traceparent in the call's headers).
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Inject writes ctx's span context into h.
func Inject(ctx context.Context, h nats.Header) { Propagator.Inject(ctx, HeaderCarrier(h)) }

// Extract returns ctx with the remote span context carried by h, if any.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return Propagator.Extract(ctx, HeaderCarrier(h))
}

// HTTPPropagator reads what an HTTP caller in any language sends with a
// request: its W3C trace context (traceparent, tracestate) and baggage.
var HTTPPropagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// ExtractHTTP returns ctx with the remote span context and baggage that an
// incoming request's headers carry, if any, so that the spans the request
// causes join its caller's trace.
func ExtractHTTP(ctx context.Context, h http.Header) context.Context {
	if h.Get("traceparent") == "" && h.Get("baggage") == "" {
		return ctx // nothing to read: no allocation
	}
	return HTTPPropagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// RemoteSpanContext returns the span context carried by h, if valid.
func RemoteSpanContext(h nats.Header) (trace.SpanContext, bool) {
	sc := trace.SpanContextFromContext(Extract(context.Background(), h))
	return sc, sc.IsValid()
}
