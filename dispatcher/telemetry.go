package dispatcher

import (
	"context"
	"sync/atomic"
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
			telemetry.CallKey.String(p.key()),
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

// counted is a call published by this instance and counted in flight in
// the metrics until its outcome (see the package doc, "Metrics").
type counted struct {
	inFlight *telemetry.CallInFlight
	deadline time.Time
	dup      atomic.Bool // a resubmit of an accepted id: out of flight, counted only if its result comes here
}

// resultGrace is how long past its deadline a counted call's result may
// still come before the call counts as timed out: a worker answers a call
// past its deadline with a timeout as soon as it sees it, at the latest on
// a redelivery after a worker died holding it (its ack wait, 30s by
// default).
const resultGrace = time.Minute

// count starts counting a call about to be published, in p.counted. It
// counts nothing with metrics off, nor when this instance counts a call of
// this id already (a resubmit: one call, counted once).
func (d *Dispatcher) count(ctx context.Context, p *prepared) {
	if d.metrics == nil {
		return
	}
	// In flight before it is in the map: its result may come at once.
	c := &counted{inFlight: d.metrics.Start(ctx, p.call.Name, p.key()), deadline: p.call.Deadline}
	if _, loaded := d.counting.LoadOrStore(p.call.ID, c); loaded {
		c.inFlight.Drop()
		return
	}
	p.counted = c
}

// duplicate marks a counted call as a resubmit of an id accepted before:
// it leaves the calls in flight at once; it counts if its result comes to
// this instance (the call stored is this instance's: its own publish,
// repeated when an acknowledgement was lost, looks like a resubmit), else
// it is forgotten uncounted at its expiry, never counted by its caller's
// timeout. Nil-safe.
func (c *counted) duplicate() {
	if c != nil {
		c.dup.Store(true)
		c.inFlight.Drop()
	}
}

// published updates p's count after its publish: a refusal counts as its
// outcome, a resubmit of an accepted id is marked.
func (d *Dispatcher) published(p *prepared, duplicate bool, err error) {
	switch {
	case p.counted == nil:
	case err != nil:
		r, _ := refusal(p.call.Name, err)
		d.finish(p, r)
	case duplicate:
		p.counted.duplicate()
	}
}

// finish counts p's outcome as its caller saw it (a timeout, a
// cancellation), unless its result reached this instance first or it is a
// resubmit.
func (d *Dispatcher) finish(p *prepared, r windlass.ToolResult) {
	if c := p.counted; c != nil && !c.dup.Load() && d.counting.CompareAndDelete(p.call.ID, c) {
		c.inFlight.Done(r)
	}
}

// countResult counts the outcome of a call published here when its result
// reaches this instance.
func (d *Dispatcher) countResult(r windlass.ToolResult) {
	if d.metrics == nil {
		return
	}
	if c, ok := d.counting.LoadAndDelete(r.CallID); ok {
		c.(*counted).inFlight.Done(r)
	}
}

// expireCounted ends the count of the calls whose result is overdue at
// now: a call counts as timed out, a resubmit is forgotten uncounted.
func (d *Dispatcher) expireCounted(now time.Time) {
	if d.metrics == nil {
		return
	}
	d.counting.Range(func(k, v any) bool {
		c := v.(*counted)
		if now.Before(c.deadline.Add(resultGrace)) || !d.counting.CompareAndDelete(k, v) {
			return true
		}
		if !c.dup.Load() {
			c.inFlight.Done(windlass.ErrorResult(windlass.ToolCall{ID: k.(string)}, windlass.CodeTimeout, "no result by the deadline"))
		}
		return true
	})
}

// dropCounted takes every counted call out of flight, uncounted: a closed
// instance no longer receives results.
func (d *Dispatcher) dropCounted() {
	d.counting.Range(func(k, v any) bool {
		if d.counting.CompareAndDelete(k, v) {
			v.(*counted).inFlight.Drop()
		}
		return true
	})
}
