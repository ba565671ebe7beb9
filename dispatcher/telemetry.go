package dispatcher

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/telemetry"
)

// traceHeaderReserve is the room a traceparent header takes in a call
// message: "traceparent: 00-<32 hex>-<16 hex>-01\r\n".
const traceHeaderReserve = len("traceparent") + 55 + 4

// startSend starts the producer span of a call's publish, a child of the
// caller's span in ctx, and injects its W3C trace context into the call's
// headers. With tracing off it does nothing and allocates nothing.
func (d *Dispatcher) startSend(ctx context.Context, p *prepared) (context.Context, trace.Span) {
	if !d.tracer.Enabled() {
		return ctx, noop.Span{}
	}
	dest, template := p.subject, p.subject
	if !p.gated {
		dest, template = layout.CallDestination(p.call.Name), layout.CallsOfTool(p.call.Name)
	}
	ctx, span := d.tracer.Start(ctx, telemetry.SendSpanName(dest),
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			telemetry.MessagingSystem.String(telemetry.SystemNATS),
			telemetry.MessagingDestinationName.String(p.subject),
			telemetry.MessagingDestinationTemplate.String(template),
			telemetry.MessagingMessageID.String(p.call.ID),
			telemetry.MessagingOperationType.String(telemetry.OperationSend),
			telemetry.MessagingOperationName.String(telemetry.OperationSend),
			telemetry.GenAIToolName.String(p.call.Name),
			telemetry.GenAIToolCallID.String(p.call.ID),
		))
	telemetry.Inject(ctx, p.msg.Header)
	return ctx, span
}

// endSend ends a producer span, failed with the refusal's code if err.
func endSend(span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		code, msg := string(windlass.CodeUnavailable), err.Error()
		if ce, ok := err.(*windlass.CallError); ok {
			code, msg = string(ce.Code), ce.Message
		}
		telemetry.SetError(span, code, msg)
	}
	span.End()
}

// observeRegistry exports the live workers per tool and the view's
// staleness as gauges, when metrics are on.
func (d *Dispatcher) observeRegistry() (unregister func()) {
	return d.metrics.ObserveRegistry(func(yield func(string, int)) {
		tools, asOf := d.view.Tools()
		for _, t := range tools {
			yield(t.Spec.Name, len(t.LiveWorkers(asOf)))
		}
	}, func() time.Duration { return d.view.Staleness() })
}
