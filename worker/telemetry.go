package worker

import (
	"cmp"
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/telemetry"
	"github.com/windlass-dev/windlass/limits"
)

// startProcess starts a call's consumer span, a child of the trace context
// its headers carry (the dispatcher's producer span, or the approval
// service's release of a gated call).
func (w *Worker) startProcess(ctx context.Context, msg jetstream.Msg, t *registered) (context.Context, trace.Span) {
	ctx = telemetry.Extract(ctx, msg.Headers())
	attrs := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			telemetry.MessagingSystem.String(telemetry.SystemNATS),
			telemetry.MessagingDestinationName.String(msg.Subject()),
			telemetry.MessagingDestinationTemplate.String(layout.CallsOfTool(t.spec.Name)),
			telemetry.MessagingOperationType.String(telemetry.OperationProcess),
			telemetry.MessagingOperationName.String(telemetry.OperationProcess),
			telemetry.MessagingConsumerGroup.String(layout.ConsumerName(t.spec.Name)),
			telemetry.GenAIToolName.String(t.spec.Name),
		),
	}
	return w.tracer.Start(ctx, telemetry.ProcessSpanName(layout.CallDestination(t.spec.Name)), attrs...)
}

// identify adds the call's id and delivery count to its consumer span.
func identify(ctx context.Context, call windlass.ToolCall) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(
		telemetry.MessagingMessageID.String(call.ID),
		telemetry.GenAIToolCallID.String(call.ID),
		telemetry.MessagingDeliveryCount.Int(call.Attempt),
		telemetry.CallKey.String(cmp.Or(call.Key, limits.DefaultKey)),
	)
}

// startExecute starts the span around a tool's execution, when tracing is
// on; the tool's own spans are its children.
func (w *Worker) startExecute(ctx context.Context, call windlass.ToolCall) (context.Context, trace.Span) {
	if !w.tracer.Enabled() {
		return ctx, noop.Span{}
	}
	return w.tracer.Start(ctx, telemetry.ExecuteSpanName(call.Name),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			telemetry.GenAIOperationName.String(telemetry.OperationExecute),
			telemetry.GenAIToolName.String(call.Name),
			telemetry.GenAIToolCallID.String(call.ID),
		))
}

// endExecute ends the execution span, failed with the result's error code
// when the result is an error.
func endExecute(span trace.Span, r windlass.ToolResult) {
	if !span.IsRecording() {
		return
	}
	if r.IsError {
		telemetry.SetError(span, telemetry.OutcomeOf(r), r.Content)
	}
	span.End()
}
